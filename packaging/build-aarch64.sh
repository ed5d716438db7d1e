#!/usr/bin/env bash
# Build dist/faden-agent-linux-aarch64 on this x86_64 machine: packaging/build.sh (the same
# script as for x86_64) runs inside a Debian bookworm arm64 root filesystem under qemu-user
# emulation (tests/infra/build-arm64-image.sh makes and caches it). Slow: PyInstaller runs
# emulated (see docs/packaging.md for the time it takes).
#
#   bash packaging/build-aarch64.sh            # -> dist/faden-agent-linux-aarch64 (+ .sha256)
#   FADEN_AGENT_DIST=/some/dir FADEN_AGENT_BUILD_VERSION=... work as for build.sh.
#
# build.sh installs the lock files (packaging/requirements.lock, build-tools.lock: every
# wheel's hash, aarch64's included), so both architectures bundle the same versions. Its
# virtual environment, pip's cache and the PyInstaller bundle are kept in /var/tmp between
# builds (installing and bundling under emulation are slow).
# pip trusts this machine's CA bundle (a TLS-inspecting proxy's CA, where there is one).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
cd "$repo"
dist="${FADEN_AGENT_DIST:-$repo/dist}"
mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
cache="${FADEN_AGENT_ARM64_CACHE:-/var/tmp/faden-arm64-build}"
mkdir -p "$cache/pip" "$cache/venv" "$cache/bundle"

image=$(bash tests/infra/build-arm64-image.sh)

# The sources travel as a copy (pip and PyInstaller write next to them); dist/ is shared.
docker run --rm --network host \
  -v "$repo:/src:ro" -v "$dist:/out" -v "$cache/pip:/root/.cache/pip" -v "$cache/venv:/opt/venv" \
  -v "$cache/bundle:/opt/bundle" -e FADEN_AGENT_BUILD_BUNDLE=/opt/bundle/faden-agent \
  -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
  -e PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
  -e FADEN_AGENT_BUILD_VERSION="${FADEN_AGENT_BUILD_VERSION:-}" -e FADEN_AGENT_REBUILD="${FADEN_AGENT_REBUILD:-0}" \
  "$image" bash -euo pipefail -c '
    [ "$(uname -m)" = aarch64 ] || { echo "build-aarch64.sh: the build root runs as $(uname -m)" >&2; exit 1; }
    mkdir /build
    tar -C /src --exclude=./.git --exclude=./dist --exclude=./build --exclude="*.egg-info" --exclude=__pycache__ -cf - . | tar -C /build -xf -
    cd /build
    [ -n "$FADEN_AGENT_BUILD_VERSION" ] || unset FADEN_AGENT_BUILD_VERSION
    # Niced: an emulated build takes every cycle it gets (a niceness set outside does not
    # reach processes that the Docker engine starts).
    PYTHON=python3 FADEN_AGENT_BUILD_VENV=/opt/venv FADEN_AGENT_DIST=/out nice -n 10 bash packaging/build.sh
  '
