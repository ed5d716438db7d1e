#!/usr/bin/env bash
# Build (once) the Docker image of a newcomer's Debian 12: debootstrap minbase with the system
# python3 and python3-venv and nothing else of the project's (no pip in the system Python, its
# /usr/lib/python3.11/EXTERNALLY-MANAGED marker in place: PEP 668), plus an ordinary user
# `newcomer` (uid 1000) with a home; then `docker import`. Cached by its tag: a second call is
# a no-op. About a minute the first time (network to the Debian mirror only).
# Usage: build-python-image.sh [TAG]   (default faden-test/python-venv:bookworm-1)
set -euo pipefail
TAG="${1:-faden-test/python-venv:bookworm-1}"
# One build at a time (parallel test workers may ask together); the second finds it cached.
exec 9>"/var/tmp/faden-python-image.lock"
flock 9
if docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "$TAG"
  exit 0
fi
command -v debootstrap >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
}
MIRROR="${FADEN_TEST_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
root=$(mktemp -d /var/tmp/faden-python-root.XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv bookworm "$root" "$MIRROR" >"$root.log" 2>&1 \
  || { tail -30 "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"
# The point of this image: the system Python is PEP 668 managed and has no pip of its own.
[ -f "$root/usr/lib/python3.11/EXTERNALLY-MANAGED" ] || { echo "no EXTERNALLY-MANAGED marker in the image" >&2; exit 1; }
chroot "$root" useradd --create-home --uid 1000 --shell /bin/bash newcomer
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" --numeric-owner -c . | docker import -c 'CMD ["/bin/bash"]' - "$TAG" >/dev/null
echo "$TAG"
