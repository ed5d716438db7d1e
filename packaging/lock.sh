#!/usr/bin/env bash
# Regenerate the hashed lock files the standalone binary is built from (packaging/build.sh,
# packaging/build-aarch64.sh) and CI installs (.ci/run):
#   packaging/requirements.lock  the agent's dependencies (pyproject.toml), every wheel's hash
#   packaging/build-tools.lock   PyInstaller and what it needs (packaging/build-tools.in)
# pip-compile (pip-tools) is a development tool only: it lives in a venv of its own under
# build/, never in the agent's. Run after changing a dependency; commit the lock files.
#   bash packaging/lock.sh                 # keep the pins, add what is new
#   bash packaging/lock.sh --upgrade       # newest versions the ranges allow
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$(dirname "$here")"
python=${PYTHON:-$(sh packaging/pick-python.sh)}
tools=build/venv-lock-tools
[ -x "$tools/bin/pip-compile" ] || { "$python" -m venv "$tools" && "$tools/bin/pip" install -q 'pip-tools==7.6.2'; }
export CUSTOM_COMPILE_COMMAND="bash packaging/lock.sh"
compile() {
  "$tools/bin/pip-compile" -q --generate-hashes --strip-extras --allow-unsafe --no-emit-index-url \
    --no-emit-find-links "$@"
}
compile --output-file packaging/requirements.lock "${@}" pyproject.toml
compile --output-file packaging/build-tools.lock "${@}" packaging/build-tools.in
echo "lock.sh: wrote packaging/requirements.lock and packaging/build-tools.lock"
