"""Host paths that hand a root container the machine on an ordinary host: what the host policy must
refuse as a bind source."""

from __future__ import annotations

# On an ordinary host these hand a root container the machine: dockerd's
# containerd, the system bus, systemd, the agent's own binary, every device, other logs.
HOST_PATHS = (
    "/run/docker",
    "/run/containerd",
    "/var/run/containerd",
    "/run/dbus",
    "/run/systemd",
    "/usr",
    "/usr/local/bin",
    "/home",
    "/dev",
    "/var/log",
    "/run/user",
    "/proc/1/root",
    "/tmp",
)
