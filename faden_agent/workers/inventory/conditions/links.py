"""The link state of network interfaces from sysfs (`class/net/<name>/operstate`, RFC 2863's
words): up, or why not (down, lowerlayerdown, dormant, notpresent, testing, missing); `unknown`
(drivers that do not track it) counts as up while the carrier is."""

from __future__ import annotations

from pathlib import Path

from faden_agent.node.sysfs import read_attr, read_int

MISSING = "missing"


def link_state(sysfs_root: Path, name: str) -> str:
    """`up`, or the state it is in instead (`missing`: no such interface)."""
    base = Path(sysfs_root) / "class" / "net" / name
    state = read_attr(base / "operstate")
    if state is None:
        return MISSING if not base.exists() else "unknown"
    if state == "unknown" and read_int(base / "carrier") == 1:
        return "up"
    return state
