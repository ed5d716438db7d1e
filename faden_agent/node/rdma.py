"""The RDMA devices of this machine from sysfs (`class/infiniband/<device>`): each one's PCI
address, network interfaces and ports; an InfiniBand port's GUID and subnet prefix from its
GID 0 (prefix and GUID, 64 bits each, written as ibstat does: `0xfe80000000000000`)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from faden_agent.node.sysfs import BUS_ID, list_dir, read_attr

MAX_DEVICES = 64
MAX_PORTS = 8
MAX_NETDEVS = 8
_GID = re.compile(r"[0-9a-f]{4}(:[0-9a-f]{4}){7}")
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def bus_id_of(path: Path) -> str | None:
    """The PCI address a sysfs `device` link points at, or None."""
    try:
        real = os.path.realpath(path, strict=True)
    except OSError:
        return None
    name = os.path.basename(real)
    return name if BUS_ID.fullmatch(name) else None


def gid_parts(gid: str | None) -> tuple[str, str] | None:
    """(subnet prefix, port GUID) of a GID, or None when it is no GID or all zero."""
    if gid is None or not _GID.fullmatch(gid.lower()):
        return None
    digits = gid.lower().replace(":", "")
    if int(digits[16:], 16) == 0:
        return None
    return "0x" + digits[:16], "0x" + digits[16:]


def read_devices(sysfs_root: Path) -> list[dict[str, Any]]:
    """Every RDMA device, by name: {"device", "pci_bus_id", "netdevs", "ports": [{"port",
    "link_layer", "subnet_prefix", "port_guid"}]}; [] on a machine without any."""
    base = Path(sysfs_root) / "class" / "infiniband"
    devices = []
    for name in list_dir(base, MAX_DEVICES):
        if not _NAME.fullmatch(name):
            continue
        device = base / name
        netdevs = [n for n in list_dir(device / "device" / "net", MAX_NETDEVS) if _NAME.fullmatch(n)]
        ports = [
            _port(device / "ports" / port, port) for port in list_dir(device / "ports", MAX_PORTS) if port.isdigit()
        ]
        devices.append({"device": name, "pci_bus_id": bus_id_of(device / "device"), "netdevs": netdevs, "ports": ports})
    return devices


def _port(path: Path, number: str) -> dict[str, Any]:
    link_layer = read_attr(path / "link_layer")
    entry: dict[str, Any] = {"port": int(number), "link_layer": link_layer}
    if link_layer == "InfiniBand":
        parts = gid_parts(read_attr(path / "gids" / "0"))
        entry["subnet_prefix"], entry["port_guid"] = parts if parts else (None, None)
    return entry
