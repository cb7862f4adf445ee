#!/usr/bin/env bash
# System packages `make bench` runs: wrk (the C load generator that measures the servers, not itself) and
# Debian's golang-go (builds bench/gopeer, the Go peer: standard library only, nothing downloaded).
# Idempotent and non-interactive, like scripts/system-deps.sh: fast when everything is present, and
# `apt-get update` runs at most once per call, only when something is missing.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
missing=()
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v go >/dev/null 2>&1 || [ -x /usr/lib/go/bin/go ] || missing+=(golang-go)
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "[bench-deps] ERROR: need root to install: ${missing[*]} (or install them yourself)" >&2; exit 1
  fi
fi
echo "[bench-deps] installing: ${missing[*]}"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
