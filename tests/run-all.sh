#!/usr/bin/env bash
# The whole test suite, as the README gives it: services, then the parallel part
# (pytest-xdist), then the serial part (tests that stop dockerd or the registry) alone.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -e '.[test]'
bash tests/infra/start-services.sh
export FADEN_TEST_REQUIRE_DOCKER=1
status=0
python3 -m pytest -n 2 -m "not serial" "$@" || status=$?
python3 -m pytest -m serial "$@" || { s=$?; [ $s -eq 5 ] || status=$s; }
exit $status
