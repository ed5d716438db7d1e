#!/usr/bin/env bash
# Start a real Docker Engine 29.1.5 (with its own containerd and the containerd image store,
# as a fresh Docker 29 install has it) beside the machine's own dockerd, for tests.
#
#   DOCKER29_BIN=FOLDER run-dockerd29.sh DIR [-- EXTRA DOCKERD FLAGS...]
#
# FOLDER holds dockerd, containerd and containerd-shim-runc-v2 (tests/support/testtools.py
# puts them in its cache, docker-29.1.5/). Everything lives under DIR (made if missing):
# containerd's root and state, dockerd's --data-root and --exec-root, the pid file, and the
# API socket DIR/docker.sock, which is the address to hand a client (unix://DIR/docker.sock).
# Its default bridge network is a bridge of its own, BRIDGE (default d29br0, made if missing,
# 198.18.29.1/24: the benchmarking range), with --iptables=false --ip6tables=false. Never
# --bridge=none in the host's network namespace: a dockerd started so deletes the interface
# named docker0, the host engine's bridge. Add flags after "--". runc comes from the machine
# (Debian's runc, installed with docker.io).
#
# The script stays in the foreground holding both daemons; its pid is the one to stop:
# SIGTERM (or SIGINT) stops dockerd, then containerd, and waits for both. Wait until
# `curl --unix-socket DIR/docker.sock http://d/_ping` answers OK (2-10 s).
# The engine answers /version with ApiVersion 1.52, MinAPIVersion 1.44, and refuses older
# request versions ("client version 1.41 is too old..."). Debian's `docker` CLI (20.10,
# API 1.41) is refused by it: talk to it with docker-py (version="auto") or curl.
set -euo pipefail
bin=${DOCKER29_BIN:?set DOCKER29_BIN to the folder of dockerd, containerd and containerd-shim-runc-v2}
dir=${1:?usage: DOCKER29_BIN=FOLDER run-dockerd29.sh DIR [-- dockerd flags]}
shift
extra=()
if [ $# -gt 0 ]; then
  [ "$1" = "--" ] || { echo "run-dockerd29.sh: unknown option $1" >&2; exit 2; }
  shift; extra=("$@")
fi
for b in dockerd containerd containerd-shim-runc-v2; do
  [ -x "$bin/$b" ] || { echo "run-dockerd29.sh: $bin/$b is missing" >&2; exit 1; }
done
command -v runc >/dev/null || { echo "run-dockerd29.sh: runc is missing (apt-get install runc)" >&2; exit 1; }
bridge=${BRIDGE:-d29br0}
if ! ip link show "$bridge" >/dev/null 2>&1; then
  ip link add "$bridge" type bridge && ip addr add "${BRIDGE_CIDR:-198.18.29.1/24}" dev "$bridge" && ip link set "$bridge" up
fi
mkdir -p "$dir"/ctrd-root "$dir"/ctrd-state "$dir"/data "$dir"/exec
dir=$(cd "$dir" && pwd)
# containerd's config as Docker's containerd.io package ships it: the CRI plugin off. With it
# on, each containerd binds the machine-wide /var/run/nri/nri.sock, and a second engine on the
# machine (one per xdist worker) fails "address already in use".
printf 'version = 3\ndisabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.nri.v1.nri"]\n' >"$dir/containerd.toml"
export PATH="$bin:$PATH"   # dockerd finds containerd-shim-runc-v2 through containerd
"$bin/containerd" --config "$dir/containerd.toml" --root "$dir/ctrd-root" --state "$dir/ctrd-state" --address "$dir/containerd.sock" \
  >"$dir/containerd.log" 2>&1 &
ctrd=$!
for _ in $(seq 100); do [ -S "$dir/containerd.sock" ] && break; sleep 0.1; done
"$bin/dockerd" --containerd "$dir/containerd.sock" --data-root "$dir/data" --exec-root "$dir/exec" \
  -H "unix://$dir/docker.sock" --pidfile "$dir/docker.pid" --bridge="$bridge" --iptables=false --ip6tables=false \
  ${extra[@]+"${extra[@]}"} >"$dir/dockerd.log" 2>&1 &
dockerd=$!
stop() {
  kill -TERM "$dockerd" 2>/dev/null || true; wait "$dockerd" 2>/dev/null || true
  kill -TERM "$ctrd" 2>/dev/null || true; wait "$ctrd" 2>/dev/null || true
}
trap 'stop; exit 0' TERM INT
wait "$dockerd" || true
stop
