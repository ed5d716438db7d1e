#!/usr/bin/env bash
# Build (once) the Docker image of a newcomer's Debian 12: debootstrap minbase with the system
# python3 and python3-venv and nothing else of the project's (no pip in the system Python, its
# /usr/lib/python3.11/EXTERNALLY-MANAGED marker in place: PEP 668), plus an ordinary user
# `newcomer` (uid 1000) with a home; then `docker import`. Cached by its tag: a second call is
# a no-op. 129 s the first time here (network to the Debian mirror only).
# Usage: build-python-image.sh [TAG]   (default faden-test/python-venv:bookworm-1)
set -euo pipefail
TAG="${1:-faden-test/python-venv:bookworm-1}"
source "$(dirname "$0")/debian-image.sh"
image_cached python "$TAG"
debootstrap_root python --variant=minbase --include=python3,python3-venv
# The point of this image: the system Python is PEP 668 managed and has no pip of its own.
[ -f "$root/usr/lib/python3.11/EXTERNALLY-MANAGED" ] || { echo "no EXTERNALLY-MANAGED marker in the image" >&2; exit 1; }
chroot "$root" useradd --create-home --uid 1000 --shell /bin/bash newcomer
import_root "$TAG" -c 'CMD ["/bin/bash"]'
