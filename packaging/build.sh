#!/usr/bin/env bash
# Build the standalone agent: dist/faden-agent-linux-<arch> (one self-contained executable,
# no Python needed on the target) and dist/faden-agent-linux-<arch>.sha256 (sha256sum format)
# and .size (its bytes, for the installer's download bound).
#
#   bash packaging/build.sh                          # version from faden_agent/__init__.py
#   FADEN_AGENT_BUILD_VERSION=0.1.1 bash packaging/build.sh   # stamp another version
#   FADEN_AGENT_DIST=/some/dir bash packaging/build.sh        # write elsewhere than dist/
#
# The same script builds aarch64 on an aarch64 machine (PyInstaller does not cross-build).
# Reuses the previous binary when neither the sources nor the version changed (the build
# takes minutes on 2 cores); FADEN_AGENT_REBUILD=1 forces a build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
cd "$repo"

# The interpreter decides the binary's memory (packaging/pick-python.sh): the active venv's
# (.ci/run makes one with that choice), else the pick. Only its interpreter is used: the
# packages come from the lock files (below).
if [ -z "${PYTHON:-}" ]; then
  if [ -n "${VIRTUAL_ENV:-}" ]; then PYTHON=$VIRTUAL_ENV/bin/python; else PYTHON=$(sh "$here/pick-python.sh"); fi
fi
arch=$(uname -m)
case "$arch" in
  x86_64|amd64) arch=x86_64 ;;
  aarch64|arm64) arch=aarch64 ;;
  *) echo "build.sh: unsupported architecture $arch" >&2; exit 1 ;;
esac
dist="${FADEN_AGENT_DIST:-$repo/dist}"
name="faden-agent-linux-$arch"
source_version=$("$PYTHON" -c 'import re,sys; print(re.search(r"__version__ = \"([^\"]+)\"", open("faden_agent/__init__.py").read()).group(1))')
version="${FADEN_AGENT_BUILD_VERSION:-$source_version}"
case "$version" in
  ""|*[!0-9A-Za-z.+-]*) echo "build.sh: FADEN_AGENT_BUILD_VERSION='$version' is not allowed: expected letters, digits and . + -" >&2; exit 2 ;;
esac

# One build at a time per output directory (parallel test workers share dist/).
mkdir -p "$dist"
exec 9>"$dist/.$name.lock"
flock 9

# Fingerprint of everything that goes into the binary: skip the build when unchanged. The
# sources' part alone names the PyInstaller bundle, which another version reuses (below).
locks="packaging/requirements.lock packaging/build-tools.lock"
sources=$( { "$PYTHON" --version; \
  find faden_agent packaging/entry.py packaging/build.sh packaging/launcher.sh pyproject.toml $locks -name '*.py' -o -name '*.sh' -o -name '*.toml' -o -name '*.lock' \
  | LC_ALL=C sort | xargs sha256sum; } | sha256sum | cut -d' ' -f1)
fingerprint=$(printf '%s %s\n' "$version" "$sources" | sha256sum | cut -d' ' -f1)
stamp="$dist/.$name.fingerprint"
if [ "${FADEN_AGENT_REBUILD:-0}" != 1 ] && [ -x "$dist/$name" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$fingerprint" ]; then
  echo "build.sh: $dist/$name is up to date ($version)"
  exit 0
fi

# The build's own venv holds exactly the lock files' packages, hash-checked (packaging/lock.sh
# writes them): the agent's dependencies as bundled, and PyInstaller (a build tool, not a
# dependency). One per interpreter and lock content, kept between builds (FADEN_AGENT_BUILD_VENV
# names another place, e.g. the aarch64 build's cache); the sources come from this checkout.
lock_id=$(cat $locks | sha256sum | cut -c1-16)
venv="${FADEN_AGENT_BUILD_VENV:-$repo/build/venv-$arch-$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')}"
# Builds into other output directories (the upgrade test's) share it: made under a lock of its own.
mkdir -p "$(dirname "$venv")"
exec 8>"$venv.lock"
flock 8
if [ "$(cat "$venv/.lock-id" 2>/dev/null)" != "$lock_id" ] || [ ! -x "$venv/bin/python" ]; then
  "$PYTHON" -m venv --clear "$venv"  # --clear, not rm: the aarch64 build's venv is a mount point
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --require-hashes --no-deps $(printf -- '-r %s ' $locks)
  "$venv/bin/python" -m pip check >/dev/null || { "$venv/bin/python" -m pip check >&2; echo "build.sh: the lock files are incomplete: run packaging/lock.sh" >&2; exit 1; }
  echo "$lock_id" >"$venv/.lock-id"
fi
flock -u 8
PYTHON=$venv/bin/python
# Each bundled package's metadata goes in too: the binary's versions can be read back
# (tests/integration/service/test_standalone_binary.py compares them with the lock).
bundled=$(grep -E '^[A-Za-z0-9]' packaging/requirements.lock | cut -d= -f1)

work=$(mktemp -d "${TMPDIR:-/tmp}/faden-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
# The version is stamped by a runtime hook (runs before the CLI is imported), so a build
# with another version needs no edit of the sources.
# The hook reads the version from a file beside the bundled interpreter, so the bundle itself
# is the same for every version of the same sources.
cat >"$work/stamp_version.py" <<'PY'
import os
import sys

import faden_agent

with open(os.path.join(sys._MEIPASS, "faden-agent-version"), encoding="ascii") as stamp:
    faden_agent.__version__ = stamp.read().strip()
PY

# Workers are imported by name after fork ("module:Class"), so PyInstaller cannot see them:
# collect every faden_agent module, the zmq backend, the docker SDK and pynvml explicitly.
# Other packages of the build machine's Python that optional imports would drag in
# (typer -> rich, docker -> paramiko/cryptography, ...): the agent needs none of them.
EXCLUDES="tkinter _tkinter pytest _pytest hypothesis numpy pandas scipy cryptography paramiko nacl bcrypt
  yaml IPython jedi matplotlib PIL setuptools pkg_resources
  pip curses _curses readline lib2to3 pydoc_data unittest xmlrpc cffi pycparser"
# The bundle of these sources, kept between builds (a build of another version, the upgrade
# test's, takes seconds instead of a PyInstaller run); made and read under a lock of its own.
bundle="${FADEN_AGENT_BUILD_BUNDLE:-$repo/build/bundle-$arch-$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')}"
mkdir -p "$(dirname "$bundle")"
exec 7>"$bundle.lock"
flock 7
if [ "$(cat "$bundle/.sources" 2>/dev/null)" = "$sources" ] && [ -d "$bundle/faden-agent" ]; then
  mkdir -p "$work/dist"
  cp -a "$bundle/faden-agent" "$work/dist/faden-agent"
  echo "build.sh: reusing the bundle of these sources ($bundle)"
else
  # A onedir build (no per-start unpacking: the bootloader runs Python in its own process),
  # shipped as one file by packaging/launcher.sh: why in docs/packaging.md.
  # --optimize 2: the modules compiled as `python -OO` would (docstrings and asserts out: about
  # 2 MiB less for the agent's tree, docs/service.md); the CLI's help is given as text.
  "$PYTHON" -m PyInstaller --noconfirm --clean --onedir --log-level WARN --optimize 2 \
    --name faden-agent --distpath "$work/dist" --workpath "$work/build" --specpath "$work" \
    --runtime-hook "$work/stamp_version.py" \
    --collect-submodules faden_agent \
    --collect-submodules zmq.backend.cython \
    --collect-data faden_agent \
    --collect-submodules docker \
    --hidden-import pynvml \
    --hidden-import cramjam \
    --hidden-import psutil \
    --hidden-import setproctitle \
    --add-binary "$venv/bin/py-spy:." \
    --paths "$repo" \
    $(printf -- '--copy-metadata %s ' $bundled) \
    $(printf -- '--exclude-module %s ' $EXCLUDES) \
    packaging/entry.py
  rm -rf "$bundle.tmp" && mkdir -p "$bundle.tmp"
  cp -a "$work/dist/faden-agent" "$bundle.tmp/faden-agent"
  echo "$sources" >"$bundle.tmp/.sources"
  rm -rf "$bundle" && mv "$bundle.tmp" "$bundle"
fi
flock -u 7
printf '%s\n' "$version" >"$work/dist/faden-agent/_internal/faden-agent-version"

# py-spy (the stacks of a stalled engine, workers/inventory/capture/pyspy.py) is a static binary
# from its wheel, run beside the agent: it must be there and run on this architecture.
"$work/dist/faden-agent/_internal/py-spy" --version >/dev/null \
  || { echo "build.sh: the bundled py-spy is missing or does not run" >&2; exit 1; }

# The payload: reproducible order and times, owned by root, nothing writable by group or
# others (root's agent runs it; the launcher also unpacks without restoring owners).
tar -C "$work/dist/faden-agent" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --mode=go-w \
  -cf - . | gzip -n -6 >"$work/payload.tar.gz"
build_id=$(sha256sum "$work/payload.tar.gz" | cut -c1-16)
# The header's size does not depend on the offset it holds (padded to 10 characters with
# spaces, which end the assignment; leading zeros would read as octal).
render_header() {
  sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@BUILD@/$build_id-$version/" -e "s/@OFFSET@/$1/" packaging/launcher.sh
}
offset=$(render_header "          " | wc -c)
{ render_header "$(printf "%-10d" "$offset")"; cat "$work/payload.tar.gz"; } >"$work/$name"
chmod 0755 "$work/$name"

got=$(FADEN_AGENT_UNPACK_DIR="$work/unpack" "$work/$name" --version)
[ "$got" = "faden-agent $version" ] || { echo "build.sh: the binary says '$got', expected 'faden-agent $version'" >&2; exit 1; }
mkdir -p "$dist"
# Atomic replacement: a reader never sees a half-written binary or a stale checksum pair.
cp "$work/$name" "$dist/.$name.tmp"
mv -f "$dist/.$name.tmp" "$dist/$name"
(cd "$dist" && sha256sum "$name" >".$name.sha256.tmp" && mv -f ".$name.sha256.tmp" "$name.sha256")
# Its size, for the installer's download bound (install.sh reads <name>.size).
(cd "$dist" && wc -c <"$name" | tr -d ' ' >".$name.size.tmp" && mv -f ".$name.size.tmp" "$name.size")
echo "$fingerprint" >"$stamp"
echo "build.sh: built $dist/$name ($version, $(du -h "$dist/$name" | cut -f1))"
