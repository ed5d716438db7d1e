"""Network interfaces: addresses, MTU, link state and speed where the kernel knows it."""

from __future__ import annotations

import socket
from typing import Any

import psutil

# Host-side ends of container veth pairs come and go with every container: noise for the
# backend (and a change of the record each time), so they are left out.
SKIPPED_PREFIXES = ("veth",)

_FAMILIES = {socket.AF_INET: "ipv4", socket.AF_INET6: "ipv6", psutil.AF_LINK: "mac"}


def probe_network() -> list[dict[str, Any]]:
    addresses = psutil.net_if_addrs()
    stats = psutil.net_if_stats()
    interfaces = []
    for name in sorted(addresses.keys() | stats.keys()):
        if name.startswith(SKIPPED_PREFIXES):
            continue
        stat = stats.get(name)
        interfaces.append(
            {
                "name": name,
                "up": stat.isup if stat else None,
                "mtu": stat.mtu if stat else None,
                "speed_mbps": (stat.speed or None) if stat else None,  # 0: unknown (virtual links)
                "addresses": [
                    {"family": _FAMILIES[a.family], "address": a.address, "netmask": a.netmask}
                    for a in addresses.get(name, ())
                    if a.family in _FAMILIES
                ],
            }
        )
    return interfaces
