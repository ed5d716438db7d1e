#!/usr/bin/env bash
# Build (once) the Docker image of a minimal Debian bookworm with a real systemd and no
# Python: debootstrap minbase + systemd, systemd-sysv, dbus, libpam-systemd (user managers),
# curl (install.sh downloads with it), ca-certificates; then `docker import`. Cached by its tag: a second call is a no-op.
# Usage: build-systemd-image.sh [TAG]   (default faden-test/systemd:bookworm-3)
# Run it with the flags of DESIGN.md section 5 (no --privileged here):
#   docker run -d --cap-add SYS_ADMIN --security-opt seccomp=unconfined --cgroupns=host \
#     -v /sys/fs/cgroup:/sys/fs/cgroup:rw --tmpfs /run --tmpfs /run/lock TAG /lib/systemd/systemd
set -euo pipefail
TAG="${1:-faden-test/systemd:bookworm-3}"
source "$(dirname "$0")/debian-image.sh"
image_cached systemd "$TAG"
debootstrap_root systemd --variant=minbase --include=systemd,systemd-sysv,dbus,libpam-systemd,curl,ca-certificates,procps
# No Python inside: the agent must run from its standalone binary alone.
if compgen -G "$root/usr/bin/python*" >/dev/null; then
  echo "the systemd image unexpectedly contains Python" >&2
  exit 1
fi
# Units that make no sense in a container or slow its boot.
for unit in getty.target console-getty.service systemd-udevd.service systemd-udev-trigger.service \
            systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer \
            e2scrub_all.timer fstrim.timer systemd-tmpfiles-clean.timer; do
  ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
# No /etc/hostname: with the host network, systemd must not touch any hostname.
rm -f "$root/etc/hostname"
# Persistent journal is not needed; volatile journal in /run is enough for the tests.
mkdir -p "$root/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=volatile\n' >"$root/etc/systemd/journald.conf.d/volatile.conf"
import_root "$TAG" -c 'ENV container=docker' -c 'CMD ["/lib/systemd/systemd"]'
