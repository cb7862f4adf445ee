#!/usr/bin/env bash
# System packages the test suite runs for real: nats-server (the NATS provider's broker), promtool (Debian's
# prometheus package: tests/unit/test_prometheus_rules.py evaluates config/monitoring's rules) and Debian's
# Chromium with its ChromeDriver (tests/browser/ drive the web UI in a real headless browser; Selenium
# is pointed at /usr/bin/chromium and /usr/bin/chromedriver and never downloads a browser or a driver).
# Idempotent and non-interactive; fast when everything is present. The kube-apiserver and etcd are
# handled by tests/e2e/build-apiserver.sh.
#
# Where Chromium cannot be installed (no root, a distribution without the packages) the browser tests skip
# with a line saying so — except on CI (CI set): there this script fails instead, as for nats-server.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
missing=()
command -v nats-server >/dev/null 2>&1 || missing+=(nats-server)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
browser=()  # the exact paths tests/browser/kit.py uses
[ -x /usr/bin/chromium ] || browser+=(chromium)
[ -x /usr/bin/chromedriver ] || browser+=(chromium-driver)
if [ "${#missing[@]}" -eq 0 ] && [ "${#browser[@]}" -eq 0 ]; then
  exit 0
fi
all=("${missing[@]}" "${browser[@]}")
on_ci() { case "${CI:-}" in "" | 0 | false | False | FALSE) return 1 ;; *) return 0 ;; esac; }
no_browser() {
  if on_ci; then
    echo "[system-deps] ERROR: could not install ${browser[*]} (CI is set: the browser tests must run)" >&2
    exit 1
  fi
  echo "[system-deps] WARNING: could not install ${browser[*]}: the browser tests (tests/browser/) will skip" >&2
  exit 0
}
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    if [ "${#missing[@]}" -ne 0 ]; then
      echo "[system-deps] ERROR: need root to install: ${all[*]}" >&2; exit 1
    fi
    no_browser
  fi
fi
echo "[system-deps] installing: ${all[*]}"
$SUDO apt-get update -qq
if [ "${#missing[@]}" -ne 0 ]; then
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null >/dev/null
fi
if [ "${#browser[@]}" -ne 0 ]; then
  $SUDO apt-get install -y -qq --no-install-recommends "${browser[@]}" </dev/null >/dev/null || no_browser
fi
