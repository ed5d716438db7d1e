#!/usr/bin/env bash
# Start the cluster rig by hand (docs/cluster-rig.md): N machines on this host, each with
# its own network namespace, Docker engine and agent, enrolled with one reference backend
# on 198.18.0.1. Holds them until Ctrl-C, then removes everything.
#   tests/infra/cluster-rig.sh up [N] [--no-agents]
#   tests/infra/cluster-rig.sh down      remove what a killed rig left behind
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$(id -u)" = 0 ] || { echo "cluster-rig: needs root (network namespaces, dockerd)" >&2; exit 1; }
docker image inspect faden-test/busybox:1 >/dev/null 2>&1 || bash tests/infra/start-services.sh
command -v ethtool >/dev/null || bash tests/infra/start-services.sh
exec env PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" python3 -m tests.cluster.rig "${@:-up}"
