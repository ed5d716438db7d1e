#!/usr/bin/env bash
# Build (once) the Docker image of a Debian bookworm arm64 root filesystem that builds and
# smoke-tests the aarch64 agent under qemu-user emulation: debootstrap --arch=arm64 minbase
# + Python 3.11 (its shared libpython, which PyInstaller bundles), venv, binutils (PyInstaller
# reads ELF headers with objdump), ca-certificates; then `docker import --platform linux/arm64`.
# Cached by its tag, like build-systemd-image.sh: a second call is a no-op.
# Usage: build-arm64-image.sh [TAG]   (default faden-test/arm64-build:bookworm-1)
# Needs qemu-user-static registered with binfmt_misc ("F" flag, so the emulator works inside
# containers and chroots): packaging/emulation.sh sets that up.
set -euo pipefail
TAG="${1:-faden-test/arm64-build:bookworm-1}"
here=$(cd "$(dirname "$0")" && pwd)
exec 9>"/var/tmp/faden-arm64-image.lock"
flock 9
if docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "$TAG"
  exit 0
fi
bash "$here/../../packaging/emulation.sh" >&2
command -v debootstrap >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
}
MIRROR="${FADEN_TEST_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
root=$(mktemp -d /var/tmp/faden-arm64-root.XXXXXX)
trap 'rm -rf "$root" "$root.log"' EXIT
# The second stage runs arm64 programs in the chroot: binfmt_misc hands them to qemu.
debootstrap --arch=arm64 --variant=minbase \
  --include=python3,python3-venv,libpython3.11,binutils,ca-certificates,procps \
  bookworm "$root" "$MIRROR" >"$root.log" 2>&1 || { tail -30 "$root.log" >&2; exit 1; }
[ "$(chroot "$root" uname -m)" = aarch64 ] || { echo "the arm64 root does not run as aarch64" >&2; exit 1; }
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" --numeric-owner -c . | docker import --platform linux/arm64 - "$TAG" >/dev/null
echo "$TAG"
