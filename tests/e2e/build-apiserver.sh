#!/usr/bin/env bash
# Build (once) a real kube-apiserver v1.20.2 from Debian bookworm's `kubernetes`
# source package and make sure Debian's etcd is installed.
#
# - Idempotent and non-interactive; needs root (or passwordless sudo) only when
#   something must be installed or built.
# - Fast path (a few seconds): the cached binary exists and runs, and `etcd` is
#   on PATH.
# - Prints the absolute path of the kube-apiserver binary on its LAST line.
#
# Environment:
#   NC_CACHE_DIR        cache dir (default: ~/.cache/notification-controller)
#   NC_KEEP_BUILD_TREE  set to 1 to keep the unpacked source tree after a build
set -Eeuo pipefail

export DEBIAN_FRONTEND=noninteractive
export CI="${CI:-true}"

CACHE_DIR="${NC_CACHE_DIR:-${HOME:-/root}/.cache/notification-controller}"
K8S_VERSION="1.20.2"
BIN="${CACHE_DIR}/kube-apiserver-v${K8S_VERSION}"
BUILD_DIR="${CACHE_DIR}/build-kube-apiserver"
SRC_LIST="/etc/apt/sources.list.d/notification-controller-deb-src.sources"

log() { echo "[build-apiserver] $*" >&2; }
die() {
  echo "[build-apiserver] ERROR: $*" >&2
  exit 1
}
trap 'die "command failed (exit $?) at line ${LINENO}: ${BASH_COMMAND}"' ERR

SUDO=()
if [[ "$(id -u)" != "0" ]]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
  else
    SUDO=(false)
  fi
fi
as_root() {
  if [[ "${SUDO[0]:-}" == "false" ]]; then
    die "need root (or passwordless sudo) to run: $*"
  fi
  "${SUDO[@]}" "$@" </dev/null
}

APT_UPDATED=0
apt_update() {
  if [[ "${APT_UPDATED}" == "0" ]]; then
    log "apt-get update"
    as_root apt-get update -qq >&2 || die "apt-get update failed"
    APT_UPDATED=1
  fi
}
apt_install() {
  apt_update
  log "apt-get install $*"
  as_root apt-get install -y -qq --no-install-recommends "$@" >&2 ||
    die "apt-get install $* failed"
}

binary_works() {
  [[ -x "${BIN}" ]] && "${BIN}" --version </dev/null >/dev/null 2>&1
}

# --- 1. etcd (checked independently of the cached binary) -------------------
if ! command -v etcd >/dev/null 2>&1; then
  apt_install etcd-server
  command -v etcd >/dev/null 2>&1 || die "etcd-server installed but 'etcd' is not on PATH"
fi
command -v kubectl >/dev/null 2>&1 || log "warning: kubectl not found on PATH (tests need /usr/bin/kubectl)"

# --- 2. fast path -------------------------------------------------------------
if binary_works; then
  log "using cached $("${BIN}" --version 2>/dev/null) at ${BIN}"
  echo "${BIN}"
  exit 0
fi

# --- 3. build -----------------------------------------------------------------
# Serialise concurrent builds (e.g. two test runs on one machine).
mkdir -p "${CACHE_DIR}"
exec 9>"${CACHE_DIR}/.build.lock"
if command -v flock >/dev/null 2>&1; then
  log "waiting for the build lock ${CACHE_DIR}/.build.lock"
  flock 9
  if binary_works; then
    log "another process built ${BIN}"
    echo "${BIN}"
    exit 0
  fi
fi

START=$(date +%s)
log "cached kube-apiserver not found at ${BIN}; building from Debian's kubernetes source (takes ~5-10 min)"

# deb-src for bookworm main, in a file of its own.
if ! grep -rqsE '^(Types:.*deb-src|deb-src )' /etc/apt/sources.list /etc/apt/sources.list.d/ ||
  ! apt-cache showsrc kubernetes 2>/dev/null | grep -q '^Package: kubernetes'; then
  if [[ ! -f "${SRC_LIST}" ]]; then
    log "adding deb-src entry ${SRC_LIST}"
    mkdir -p "${CACHE_DIR}"
    printf '%s\n' 'Types: deb-src' 'URIs: http://deb.debian.org/debian' 'Suites: bookworm' \
      'Components: main' 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' \
      >"${CACHE_DIR}/deb-src.sources"
    as_root install -m 0644 "${CACHE_DIR}/deb-src.sources" "${SRC_LIST}"
  fi
  APT_UPDATED=0
fi

apt_install golang-go etcd-server rsync jq golang-github-modern-go-reflect2-dev \
  dpkg-dev make git ca-certificates
REFLECT2_SRC=/usr/share/gocode/src/github.com/modern-go/reflect2
[[ -f "${REFLECT2_SRC}/reflect2.go" ]] || die "Debian reflect2 sources not found in ${REFLECT2_SRC}"

GO=/usr/lib/go/bin/go
[[ -x "${GO}" ]] || GO="$(command -v go)" || die "go not found after installing golang-go"
export PATH="$(dirname "${GO}"):${PATH}"
log "using $(go version)"

chmod -R u+w "${BUILD_DIR}" 2>/dev/null || true
rm -rf "${BUILD_DIR}"
mkdir -p "${BUILD_DIR}"
cd "${BUILD_DIR}"
log "downloading kubernetes source package"
apt-get source --download-only kubernetes >&2 </dev/null || die "apt-get source --download-only kubernetes failed (is deb-src enabled?)"
DSC=$(ls -1 kubernetes_*.dsc 2>/dev/null | head -n1)
[[ -n "${DSC}" ]] || die "no kubernetes .dsc downloaded"
log "unpacking ${DSC}"
dpkg-source --no-check -x "${DSC}" src >/dev/null || die "dpkg-source -x ${DSC} failed"
SRC="${BUILD_DIR}/src"
[[ -d "${SRC}/vendor" && -d "${SRC}/cmd/kube-apiserver" ]] || die "unpacked tree lacks vendor/ or cmd/kube-apiserver"

# reflect2 v1.0.1 (vendored) crashes at run time with Go >= 1.18; use Debian's 1.0.2.
log "replacing vendor/github.com/modern-go/reflect2 with Debian's copy"
rm -rf "${SRC}/vendor/github.com/modern-go/reflect2"
cp -r "${REFLECT2_SRC}" "${SRC}/vendor/github.com/modern-go/reflect2"
rm -f "${SRC}/vendor/github.com/modern-go/reflect2/go.mod"

export GOPATH="${BUILD_DIR}/gopath"
mkdir -p "${GOPATH}/src/k8s.io"
ln -sfn "${SRC}" "${GOPATH}/src/k8s.io/kubernetes"
export CGO_ENABLED=0
export GOFLAGS=""
export GOCACHE="${BUILD_DIR}/gocache"
export HOME_FOR_BUILD="${BUILD_DIR}/home"
mkdir -p "${HOME_FOR_BUILD}"

log "make WHAT=cmd/kube-apiserver (log: ${BUILD_DIR}/make.log)"
if ! (cd "${GOPATH}/src/k8s.io/kubernetes" &&
  env HOME="${HOME_FOR_BUILD}" make WHAT=cmd/kube-apiserver </dev/null >"${BUILD_DIR}/make.log" 2>&1); then
  tail -n 40 "${BUILD_DIR}/make.log" >&2 || true
  die "make WHAT=cmd/kube-apiserver failed; see ${BUILD_DIR}/make.log"
fi

OUT=$(ls -1 "${SRC}"/_output/bin/kube-apiserver "${SRC}"/_output/local/bin/*/*/kube-apiserver 2>/dev/null | head -n1 || true)
[[ -n "${OUT}" && -x "${OUT}" ]] || die "build finished but no kube-apiserver binary under ${SRC}/_output"
cp -f "${OUT}" "${BIN}.tmp"
chmod 0755 "${BIN}.tmp"
mv -f "${BIN}.tmp" "${BIN}"
binary_works || die "built ${BIN} but '${BIN} --version' fails"

if [[ "${NC_KEEP_BUILD_TREE:-0}" != "1" ]]; then
  chmod -R u+w "${BUILD_DIR}" 2>/dev/null || true
  rm -rf "${BUILD_DIR}"
fi
log "built $("${BIN}" --version) in $(($(date +%s) - START))s"
echo "${BIN}"
