#!/usr/bin/env bash
# System packages the test suite runs for real: nats-server (the NATS provider's broker) and Debian's
# Chromium with its ChromeDriver (tests/browser/ drive the web UI in a real headless browser; Selenium
# is pointed at /usr/bin/chromium and /usr/bin/chromedriver and never downloads a browser or a driver).
# Idempotent and non-interactive; fast when everything is present. The kube-apiserver and etcd are
# handled by tests/e2e/build-apiserver.sh.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
missing=()
command -v nats-server >/dev/null 2>&1 || missing+=(nats-server)
# The browser tests use these exact paths (tests/browser/kit.py).
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "[system-deps] ERROR: need root to install: ${missing[*]}" >&2; exit 1
  fi
fi
echo "[system-deps] installing: ${missing[*]}"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null >/dev/null
