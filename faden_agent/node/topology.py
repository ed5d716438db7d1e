"""Where this machine stands in the fabric (docs/protocol.md, "Labels and topology"): each GPU's
and RDMA device's NUMA node and PCIe switch, the InfiniBand subnets and port GUIDs, each GPU's
NVLink clique and fabric cluster (from NVML, when the caller has it), and the GPUDirect pairs: a
GPU and the RDMA devices under its nearest shared PCIe switch. sysfs only; lists in a stable order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from faden_agent.node import pci, rdma
from faden_agent.node.sysfs import sysfs_bus_id

MAX_GPUS = 64


def topology(sysfs_root: Path, gpus: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """`gpus`: what NVML says of each GPU ({"index", "uuid", "pci_bus_id", "nvlink_clique",
    "fabric_cluster"}); None: the NVIDIA GPUs sysfs lists, without what only NVML knows."""
    if gpus is None:
        gpus = [{"index": None, "uuid": None, "pci_bus_id": bus_id} for bus_id in pci.nvidia_gpus(sysfs_root)]
    placed_gpus = [_gpu(sysfs_root, gpu) for gpu in gpus[:MAX_GPUS]]
    devices = [_device(sysfs_root, device) for device in rdma.read_devices(sysfs_root)]
    subnets = sorted({p["subnet_prefix"] for d, _ in devices for p in d["ports"] if p.get("subnet_prefix")})
    return {
        "gpus": [gpu for gpu, _ in placed_gpus],
        "rdma": [device for device, _ in devices],
        "ib_subnets": subnets,
        "gpudirect": pairs(placed_gpus, devices),
    }


def _gpu(sysfs_root: Path, gpu: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    raw = gpu.get("pci_bus_id")
    bus_id = sysfs_bus_id(raw) if isinstance(raw, str) else None
    where = pci.place(sysfs_root, bus_id) if bus_id else {"numa_node": None, "pcie_switch": None, "switches": []}
    entry = {
        "index": gpu.get("index"),
        "uuid": gpu.get("uuid"),
        "pci_bus_id": bus_id,
        "numa_node": where["numa_node"],
        "pcie_switch": where["pcie_switch"],
        "nvlink_clique": gpu.get("nvlink_clique"),
        "fabric_cluster": gpu.get("fabric_cluster"),
    }
    return entry, where["switches"]


def _device(sysfs_root: Path, device: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    bus_id = device["pci_bus_id"]
    where = pci.place(sysfs_root, bus_id) if bus_id else {"numa_node": None, "pcie_switch": None, "switches": []}
    entry = {
        "device": device["device"],
        "netdevs": device["netdevs"],
        "pci_bus_id": bus_id,
        "numa_node": where["numa_node"],
        "pcie_switch": where["pcie_switch"],
        "ports": device["ports"],
    }
    return entry, where["switches"]


def pairs(
    gpus: list[tuple[dict[str, Any], list[str]]], devices: list[tuple[dict[str, Any], list[str]]]
) -> list[list[Any]]:
    """[[GPU index (its bus id when NVML gave none), RDMA device], ...]: per GPU the devices
    whose nearest switch shared with it is the deepest any device shares (NCCL's PIX before PXB)."""
    out: list[list[Any]] = []
    for gpu, above_gpu in gpus:
        depth_of = {switch: depth for depth, switch in enumerate(above_gpu)}
        shared = {
            device["device"]: max(depth_of[s] for s in above if s in depth_of)
            for device, above in devices
            if any(s in depth_of for s in above)
        }
        if not shared:
            continue
        deepest = max(shared.values())
        name = gpu["index"] if gpu["index"] is not None else gpu["pci_bus_id"]
        out += [[name, device] for device in sorted(shared) if shared[device] == deepest]
    return out
