#!/usr/bin/env bash
# Install and start what the test suite needs on a machine where nothing runs:
# the Docker engine, a registry on 127.0.0.1:5000, the journald tools, the local
# busybox test image (no image can be pulled from the internet here), and the third-party
# programs the tests run (Loki, Docker Engine 29: tests/infra/test-tools.toml).
# Idempotent: already-running services are reused. Exits non-zero when a part is missing
# (a third-party program only under CI=true: elsewhere the tests that need it are skipped).
set -euo pipefail

REGISTRY_PORT="${FADEN_TEST_REGISTRY_PORT:-5000}"
STATE="${FADEN_TEST_SERVICES_DIR:-/var/tmp/faden-test-services}"
mkdir -p "$STATE"

need_pkgs=()
command -v dockerd >/dev/null || need_pkgs+=(docker.io)
command -v docker-registry >/dev/null || need_pkgs+=(docker-registry)
[ -x /bin/busybox ] || need_pkgs+=(busybox-static)
[ -x /lib/systemd/systemd-journal-remote ] || need_pkgs+=(systemd-journal-remote)
command -v debootstrap >/dev/null || need_pkgs+=(debootstrap)
command -v journalctl >/dev/null || need_pkgs+=(systemd)
command -v ethtool >/dev/null || need_pkgs+=(ethtool)  # the cluster rig's delay line (tests/cluster)
command -v ip >/dev/null || need_pkgs+=(iproute2)  # network namespaces: the cluster rig, the bridge test
command -v cc >/dev/null || need_pkgs+=(gcc libc6-dev)  # the tests' C libnvidia-ml.so.1 (tests/nvml)
command -v runc >/dev/null || need_pkgs+=(runc)  # Docker Engine 29 of the tests (tests/support/engine29.py); docker.io brings it
command -v dbus-daemon >/dev/null || need_pkgs+=(dbus)  # a private system bus with a stand-in logind (tests/support/systembus.py)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "installing: ${need_pkgs[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

# promtool (`promtool check metrics` over a real agent's scrape: tests/support/metricsclient.py) and the
# Prometheus server (tests/integration/inventory/test_workload_discovery.py runs one), from Debian's
# prometheus package, unpacked only: installing it would start a Prometheus server.
if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
  rm -rf "$STATE/prometheus-deb" && mkdir -p "$STATE/prometheus-deb"
  (cd "$STATE/prometheus-deb" && { apt-get download prometheus >/dev/null 2>&1 || { apt-get update -qq && apt-get download prometheus >/dev/null 2>&1; }; } \
    && dpkg-deb -x prometheus_*.deb root \
    && { command -v promtool >/dev/null || ln -sf "$STATE/prometheus-deb/root/usr/bin/promtool" /usr/local/bin/promtool; } \
    && ln -sf "$STATE/prometheus-deb/root/usr/bin/prometheus" /usr/local/bin/prometheus)
fi

for tool in /lib/systemd/systemd-journal-remote journalctl debootstrap dockerd docker-registry /bin/busybox ip cc runc promtool prometheus dbus-daemon; do
  command -v "$tool" >/dev/null || { echo "missing after install: $tool" >&2; exit 1; }
done

# --- Loki 2.8.0 and 3.4.6, Docker Engine 29.1.5: from ../shared/tools when it is beside the
# checkout, else downloaded from their upstream releases and verified (FADEN_TEST_TOOLS_MIRROR
# for a mirror), into FADEN_TEST_TOOLS_DIR (~/.cache/faden-test-tools). What cannot be had is
# named (`python3 -m tests.support.testtools report`); under CI=true it fails this script.
(cd "$(dirname "$0")/../.." && python3 -m tests.support.testtools ensure)

# --- Docker engine
if ! docker info >/dev/null 2>&1; then
  echo "starting dockerd"
  nohup dockerd >"$STATE/dockerd.log" 2>&1 &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
fi
docker info >/dev/null 2>&1 || { echo "dockerd did not start; see $STATE/dockerd.log" >&2; tail -20 "$STATE/dockerd.log" >&2; exit 1; }

# --- registry on loopback
if ! curl -fsS "http://127.0.0.1:$REGISTRY_PORT/v2/" >/dev/null 2>&1; then
  echo "starting docker-registry on 127.0.0.1:$REGISTRY_PORT"
  cat >"$STATE/registry.yml" <<YML
version: 0.1
storage:
  filesystem:
    rootdirectory: $STATE/registry-data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$REGISTRY_PORT
YML
  nohup docker-registry serve "$STATE/registry.yml" >"$STATE/registry.log" 2>&1 &
  for _ in $(seq 30); do curl -fsS "http://127.0.0.1:$REGISTRY_PORT/v2/" >/dev/null 2>&1 && break; sleep 0.5; done
fi
curl -fsS "http://127.0.0.1:$REGISTRY_PORT/v2/" >/dev/null || { echo "registry did not start" >&2; exit 1; }

# --- the busybox test image, built locally and pushed to the registry
if ! docker image inspect faden-test/busybox:1 >/dev/null 2>&1; then
  rootfs=$(mktemp -d)
  mkdir -p "$rootfs"/{bin,etc,tmp,proc,sys,dev}
  cp /bin/busybox "$rootfs/bin/busybox"
  for applet in sh echo sleep cat ls true false seq yes date env printf mkdir rm touch wc head tail; do
    ln -s busybox "$rootfs/bin/$applet"
  done
  echo "root:x:0:0:root:/:/bin/sh" >"$rootfs/etc/passwd"
  tar -C "$rootfs" -c . | docker import -c 'CMD ["/bin/sh"]' -c 'ENV PATH=/bin' - faden-test/busybox:1 >/dev/null
  rm -rf "$rootfs"
fi
for tag in 1 2; do
  ref="127.0.0.1:$REGISTRY_PORT/faden/busybox:$tag"
  docker tag faden-test/busybox:1 "$ref"
  docker push -q "$ref" >/dev/null
done
echo "services ready: docker $(docker version -f '{{.Server.Version}}'), registry 127.0.0.1:$REGISTRY_PORT, image faden-test/busybox:1"
