"""Network interfaces: addresses, MTU, link state and speed where the kernel knows it."""

from __future__ import annotations

import os
import socket
from typing import Any

import psutil

# Host-side ends of container veth pairs come and go with every container: noise for the
# backend (and a change of the record each time), so they are left out.
SKIPPED_PREFIXES = ("veth",)

_FAMILIES = {socket.AF_INET: "ipv4", socket.AF_INET6: "ipv6", psutil.AF_LINK: "mac"}


def is_bridge(name: str) -> bool:
    return os.path.isdir(f"/sys/class/net/{name}/bridge")


def probe_network() -> list[dict[str, Any]]:
    addresses = psutil.net_if_addrs()
    stats = psutil.net_if_stats()
    interfaces = []
    for name in sorted(addresses.keys() | stats.keys()):
        if name.startswith(SKIPPED_PREFIXES):
            continue
        stat = stats.get(name)
        link = {
            "up": stat.isup if stat else None,
            "speed_mbps": (stat.speed or None) if stat else None,  # 0: unknown (virtual links)
        }
        bridge = is_bridge(name)
        entry: dict[str, Any] = {"name": name, "bridge": bridge, "mtu": stat.mtu if stat else None}
        # A bridge's carrier, speed and (unless set by hand) MAC follow whichever ports are
        # attached: docker0's change with every container start and stop. They are gauges
        # there ("usage", outside the content hash), not facts of the machine.
        entry.update({"usage": link} if bridge else link)
        entry["addresses"] = [
            {"family": _FAMILIES[a.family], "address": a.address, "netmask": a.netmask}
            for a in addresses.get(name, ())
            if a.family in _FAMILIES and not (bridge and a.family == psutil.AF_LINK)
        ]
        interfaces.append(entry)
    return interfaces
