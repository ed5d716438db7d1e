"""A sysfs tree for tests (FADEN_NODE_AGENT_SYSFS_ROOT), laid out as the kernel lays it out: a GPU
machine's PCI tree (each GPU and RDMA NIC pair under a PCIe switch: root port, switch upstream and
downstream ports), bus/pci/devices links into it, the RDMA devices (class/infiniband) with their
ports, GIDs and counters, and their network interfaces (class/net). GPU k has fake NVML's bus id."""

from __future__ import annotations

import os
from pathlib import Path

COUNTERS = (
    "port_xmit_data",
    "port_rcv_data",
    "port_xmit_packets",
    "port_rcv_packets",
    "port_rcv_errors",
    "port_xmit_discards",
    "symbol_error",
    "link_downed",
    "link_error_recovery",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
)
SUBNET = "fe80:0000:0000:0000"


def gpu_bus_id(k: int) -> str:
    return f"0000:{0x17 + k:02x}:00.0"  # tests/nvml/state.py's healthy_gpu, as sysfs writes it


def nic_bus_id(k: int) -> str:
    return f"0000:{0x60 + k:02x}:00.0"


def port_guid(k: int) -> str:
    return f"0x0c42a1030000{k:04x}"


class FakeSysfs:
    def __init__(self, root: Path, gpus: int = 8, nics: int = 8, numa_nodes: int = 2, link_layer: str = "InfiniBand"):
        self.root = root
        self.gpus, self.nics = gpus, nics
        pairs = max(gpus, nics, 1)
        for k in range(pairs):
            numa = k * numa_nodes // pairs
            root_port = f"0000:00:{k + 1:02x}.0"
            upstream, downstream = f"0000:{0x40 + 2 * k:02x}:00.0", f"0000:{0x41 + 2 * k:02x}"
            chain = ["pci0000:00", root_port, upstream]
            for bridge in (root_port, upstream):
                self._device(chain[: chain.index(bridge) + 1], "0x1000", "0x060400", numa)
            if k < gpus:
                self._device([*chain, f"{downstream}:00.0", gpu_bus_id(k)], "0x10de", "0x030200", numa)
                self._device([*chain, f"{downstream}:00.0"], "0x1000", "0x060400", numa)
            if k < nics:
                nic = self._device([*chain, f"{downstream}:01.0", nic_bus_id(k)], "0x15b3", "0x020700", numa)
                self._device([*chain, f"{downstream}:01.0"], "0x1000", "0x060400", numa)
                self._rdma(k, nic, link_layer)

    def _device(self, chain: list[str], vendor: str, pci_class: str, numa: int) -> Path:
        path = self.root / "devices" / Path(*chain)
        path.mkdir(parents=True, exist_ok=True)
        for name, value in (("vendor", vendor), ("class", pci_class), ("numa_node", str(numa))):
            (path / name).write_text(value + "\n")
        link = self.root / "bus" / "pci" / "devices" / chain[-1]
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(os.path.relpath(path, link.parent))
        return path

    def _rdma(self, k: int, nic: Path, link_layer: str) -> None:
        name, netdev = f"mlx5_{k}", f"ibp{0x60 + k}s0"
        device = nic / "infiniband" / name
        port = device / "ports" / "1"
        (port / "counters").mkdir(parents=True)
        (port / "gids").mkdir()
        (device / "device").symlink_to("../..")
        (device / "node_guid").write_text(f"0c42:a103:0000:{k:04x}\n")
        (port / "link_layer").write_text(link_layer + "\n")
        (port / "gids" / "0").write_text(f"{SUBNET}:0c42:a103:0000:{k:04x}\n")
        for counter in COUNTERS:
            (port / "counters" / counter).write_text("0\n")
        net = nic / "net" / netdev
        net.mkdir(parents=True)
        (net / "device").symlink_to("../..")
        for cls, target, title in (("infiniband", device, name), ("net", net, netdev)):
            link = self.root / "class" / cls / title
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(target, link.parent))
        self.set_port(k)
        self.link(k, "up")

    def port(self, k: int) -> Path:
        return self.root / "class" / "infiniband" / f"mlx5_{k}" / "ports" / "1"

    def set_port(
        self, k: int, state: str = "4: ACTIVE", phys_state: str = "5: LinkUp", rate: str = "400 Gb/sec (4X NDR)"
    ) -> None:
        for name, value in (("state", state), ("phys_state", phys_state), ("rate", rate)):
            write(self.port(k) / name, value)

    def bump(self, k: int, counter: str, by: int = 1) -> None:
        path = self.port(k) / "counters" / counter
        write(path, str(int(path.read_text()) + by))

    def link(self, k: int, operstate: str) -> None:
        """The state of NIC k's network interface (`up`, `down`, ...), its carrier to match."""
        net = self.root / "class" / "net" / f"ibp{0x60 + k}s0"
        write(net / "operstate", operstate)
        write(net / "carrier", "1" if operstate == "up" else "0")


def write(path: Path, text: str) -> None:
    """Replaced by a rename, as a reader must never see half of it."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text + "\n")
    os.replace(temporary, path)
