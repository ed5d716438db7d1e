"""Where the machine stands (node/topology.py, pci.py, rdma.py) over a fake sysfs tree laid out as
the kernel lays it out: NUMA nodes, PCIe switches, GPUDirect pairs, InfiniBand subnets and port
GUIDs; and the tree's worst: links out of it, junk in its files, a FIFO, names that are no PCI address."""

from __future__ import annotations

import os

from faden_agent.node import pci, rdma
from faden_agent.node.sysfs import read_attr, sysfs_bus_id
from faden_agent.node.topology import pairs, topology
from tests.support.fakesysfs import FakeSysfs, gpu_bus_id, nic_bus_id, port_guid


def nvml_view(count: int) -> list[dict]:
    return [
        {
            "index": k,
            "uuid": f"GPU-{k}",
            "pci_bus_id": f"00000000:{0x17 + k:02X}:00.0",
            "nvlink_clique": 1 + k // 4,
            "fabric_cluster": "5f2c" * 8,
        }
        for k in range(count)
    ]


def test_an_eight_gpu_machine_with_eight_rdma_nics(tmp_path):
    FakeSysfs(tmp_path, gpus=8, nics=8)
    found = topology(tmp_path, nvml_view(8))
    assert [g["pci_bus_id"] for g in found["gpus"]] == [gpu_bus_id(k) for k in range(8)]
    assert [g["numa_node"] for g in found["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert found["gpus"][3] == {
        "index": 3,
        "uuid": "GPU-3",
        "pci_bus_id": gpu_bus_id(3),
        "numa_node": 0,
        "pcie_switch": "0000:46:00.0",
        "nvlink_clique": 1,
        "fabric_cluster": "5f2c" * 8,
    }
    assert found["rdma"][3] == {
        "device": "mlx5_3",
        "netdevs": ["ibp99s0"],
        "pci_bus_id": nic_bus_id(3),
        "numa_node": 0,
        "pcie_switch": "0000:46:00.0",
        "ports": [
            {"port": 1, "link_layer": "InfiniBand", "subnet_prefix": "0xfe80000000000000", "port_guid": port_guid(3)}
        ],
    }
    assert found["ib_subnets"] == ["0xfe80000000000000"]
    assert found["gpudirect"] == [[k, f"mlx5_{k}"] for k in range(8)]


def test_without_nvml_the_gpus_come_from_the_pci_tree(tmp_path):
    FakeSysfs(tmp_path, gpus=2, nics=0)
    found = topology(tmp_path)
    assert [(g["index"], g["pci_bus_id"], g["nvlink_clique"]) for g in found["gpus"]] == [
        (None, gpu_bus_id(0), None),
        (None, gpu_bus_id(1), None),
    ]
    assert found["rdma"] == [] and found["ib_subnets"] == [] and found["gpudirect"] == []
    assert pci.nvidia_gpus(tmp_path) == [gpu_bus_id(0), gpu_bus_id(1)]  # not the bridges, not other vendors


def test_roce_ports_have_no_subnet_and_an_empty_machine_has_nothing(tmp_path):
    FakeSysfs(tmp_path / "roce", gpus=1, nics=1, link_layer="Ethernet")
    (device,) = topology(tmp_path / "roce")["rdma"]
    assert device["ports"] == [{"port": 1, "link_layer": "Ethernet"}]
    assert topology(tmp_path / "nothing") == {"gpus": [], "rdma": [], "ib_subnets": [], "gpudirect": []}


def test_pairs_prefer_the_nearest_shared_switch():
    gpus = [({"index": 0, "pci_bus_id": "g0"}, ["top", "left"]), ({"index": None, "pci_bus_id": "g1"}, ["other"])]
    devices = [({"device": "far"}, ["top"]), ({"device": "near"}, ["top", "left"]), ({"device": "x"}, ["else"])]
    assert pairs(gpus, devices) == [[0, "near"]]  # NCCL's PIX before PXB; g1 shares no switch: no pair
    assert pairs([({"index": None, "pci_bus_id": "g1"}, ["other"])], [({"device": "d"}, ["other"])]) == [["g1", "d"]]


def test_bus_ids_and_gids_at_their_worst(tmp_path):
    assert sysfs_bus_id("00000000:17:00.0") == "0000:17:00.0"
    assert sysfs_bus_id("0000:1A:00.1") == "0000:1a:00.1"
    assert sysfs_bus_id("../../etc") is None and sysfs_bus_id("") is None
    assert rdma.gid_parts("fe80:0000:0000:0000:0c42:a103:0000:0003") == ("0xfe80000000000000", "0x0c42a10300000003")
    assert rdma.gid_parts("0000:0000:0000:0000:0000:0000:0000:0000") is None  # an unused GID slot
    assert rdma.gid_parts("fe80::1") is None and rdma.gid_parts(None) is None
    assert pci.place(tmp_path, "0000:99:00.0") == {"numa_node": None, "pcie_switch": None, "switches": []}


def test_a_hostile_tree_fails_per_item_never_the_reader(tmp_path):
    sysfs = FakeSysfs(tmp_path, gpus=1, nics=2)
    port = sysfs.port(1)
    os.unlink(port / "gids" / "0")
    os.mkfifo(port / "gids" / "0")  # a FIFO: read without blocking, as empty
    (port / "link_layer").write_bytes(b"InfiniBand" + b"\xff" * 10_000)  # junk, and too long
    escape = tmp_path / "class" / "infiniband" / "../../../../etc"
    (tmp_path / "class" / "infiniband" / "evil name").symlink_to(escape)  # no RDMA device name
    (tmp_path / "bus" / "pci" / "devices" / "0000:77:00.0").symlink_to("/etc")  # a link out of the tree
    found = topology(tmp_path)
    assert [d["device"] for d in found["rdma"]] == ["mlx5_0", "mlx5_1"]
    assert found["rdma"][1]["ports"][0]["link_layer"].startswith("InfiniBand")
    assert len(found["rdma"][1]["ports"][0]["link_layer"]) <= 256
    assert found["ib_subnets"] == ["0xfe80000000000000"]  # mlx5_0's; mlx5_1 has no readable GID
    assert pci.place(tmp_path, "0000:77:00.0")["pcie_switch"] is None
    assert read_attr(port / "gids" / "0") is None
