"""Per-interface counters of this network namespace: bytes, errors, drops (psutil reads
/proc/net/dev) and link speed. Host ends of container veth pairs are left out, as in the
inventory's interface list."""

from __future__ import annotations

from typing import Any

import psutil

from faden_agent.workers.inventory.network import SKIPPED_PREFIXES


def read_nics() -> dict[str, dict[str, Any]]:
    counters = psutil.net_io_counters(pernic=True)
    try:
        stats = psutil.net_if_stats()
    except OSError:  # no SIOCETHTOOL (seen under qemu-user): link state and speed unknown, counters still right
        stats = {}
    out = {}
    for name, c in counters.items():
        if name == "lo" or name.startswith(SKIPPED_PREFIXES):
            continue
        stat = stats.get(name)
        out[name] = {
            "counters": {
                "tx_bytes": c.bytes_sent,
                "rx_bytes": c.bytes_recv,
                "errors": c.errin + c.errout,
                "drops": c.dropin + c.dropout,
            },
            "up": stat.isup if stat else None,
            "speed_mbps": (stat.speed or None) if stat else None,  # None: unknown, not zero
        }
    return out


def interface_of(local_address: str) -> str | None:
    """The interface that holds `local_address`, if any."""
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address.split("%", 1)[0] == local_address for a in addresses):
            return name
    return None
