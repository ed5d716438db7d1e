"""Where a PCI device sits: its NUMA node and the PCIe switches above it, from the chain of
bridges in its sysfs path (`devices/pci0000:00/<root port>/<switch up>/<switch down>/.../<dev>`).
Below the root port, bridges come in pairs, a switch's upstream then downstream port: a device's
switches are the upstream ports, the nearest one last. NVIDIA GPUs are found by vendor and class."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from faden_agent.node.sysfs import BUS_ID, list_dir, read_int

NVIDIA = 0x10DE
DISPLAY_CLASSES = (0x0300, 0x0302)  # VGA controller, 3D controller (the class's upper 16 bits)
MAX_DEVICES = 4096


def bridges_above(sysfs_root: Path, bus_id: str) -> list[str] | None:
    """The PCI bridges from the root port down to the device (the device left out); None when
    sysfs has no such device."""
    link = Path(sysfs_root) / "bus" / "pci" / "devices" / bus_id
    try:
        real = os.path.realpath(link, strict=True)
    except OSError:
        return None
    parts = Path(real).parts
    chain = [part for part in parts if BUS_ID.fullmatch(part)]
    if not chain or chain[-1] != bus_id:
        return None
    return chain[:-1]


def place(sysfs_root: Path, bus_id: str) -> dict[str, Any]:
    """{"numa_node", "pcie_switch"} of one device (None where unknown), and its `switches`
    (upstream ports, the root's side first) for pairing."""
    bridges = bridges_above(sysfs_root, bus_id)
    numa = read_int(Path(sysfs_root) / "bus" / "pci" / "devices" / bus_id / "numa_node")
    switches = bridges[1::2] if bridges else []
    return {
        "numa_node": numa if numa is not None and numa >= 0 else None,  # -1: the platform does not say
        "pcie_switch": switches[-1] if switches else None,
        "switches": switches,
    }


def nvidia_gpus(sysfs_root: Path) -> list[str]:
    """The bus ids of NVIDIA display and 3D controllers, sorted (what NVML would count)."""
    base = Path(sysfs_root) / "bus" / "pci" / "devices"
    found = []
    for name in list_dir(base, MAX_DEVICES):
        if not BUS_ID.fullmatch(name) or read_int(base / name / "vendor", 16) != NVIDIA:
            continue
        pci_class = read_int(base / name / "class", 16)
        if pci_class is not None and pci_class >> 8 in DISPLAY_CLASSES:
            found.append(name)
    return found
