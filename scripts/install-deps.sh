#!/bin/sh
# Install inferd's build, test and benchmark dependencies from Debian 12's archive.
# python3-torch trains the MLP speculator (scripts/train_mlp_speculator) and
# its check in make test (tests/ref/check_mlp_train.py).
# Idempotent: packages already present are not touched and apt is not even called.
# Runs as root, or through sudo when it is available.
set -eu
cd "$(dirname "$0")/.."

PKGS="build-essential pkg-config libcjson-dev libuv1-dev libmicrohttpd-dev \
libsentencepiece-dev libcmocka-dev libyaml-dev libpcre2-dev libutf8proc-dev \
libcurl4-gnutls-dev nettle-dev libgnutls28-dev clang libclang-rt-14-dev python3 python3-numpy \
python3-sentencepiece python3-jinja2 python3-torch gnuplot-nox curl openssl systemd groff-base"
# Node.js runs the end-to-end tests with the official openai SDK; a machine
# that already has node and npm (e.g. from NodeSource) keeps its own.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    PKGS="$PKGS nodejs npm"
fi

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

install_sdk() {
    # the e2e tests' npm packages, pinned by tests/e2e/package-lock.json; the
    # lock is copied into node_modules after a good install, so a changed lock
    # installs again
    if ! cmp -s tests/e2e/package-lock.json tests/e2e/node_modules/.inferd-lock; then
        (cd tests/e2e && npm ci --no-audit --no-fund --loglevel=error &&
         cp package-lock.json node_modules/.inferd-lock)
    fi
}

if [ -z "$missing" ]; then
    install_sdk
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "install-deps: need root or sudo to install:$missing" >&2
    exit 1
fi

echo "install-deps: installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
install_sdk
