"""Where the machine stands, from the real agent to the real reference backend: the operator's
labels and the topology found in a fake sysfs tree (8 GPUs under PCIe switches with 8 RDMA NICs)
and the C-level NVML (NVLink clique, fabric cluster) at enrollment and in the inventory; `status`
and `admin nodes` show them; a label changed across a restart is one small changes record."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time

import orjson

from tests.nvml.state import GpuState
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import BackendProcess, agent_env_for, backend  # noqa: F401 - the fixture
from tests.support.fakesysfs import FakeSysfs, gpu_bus_id, nic_bus_id, port_guid

CLUSTER = "5f2c0a1e-77b4-4c1d-9a0e-0123456789ab"


def stored(backend: BackendProcess, sql: str, *args) -> list[tuple]:
    db = sqlite3.connect(backend.data_dir / "backend.sqlite")
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def inventory_records(backend: BackendProcess) -> list[dict]:
    rows = stored(backend, "SELECT data FROM records WHERE kind = 'inventory' ORDER BY received_at")
    return [orjson.loads(row[0]) for row in rows]


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "faden_agent", *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_labels_and_topology_reach_the_backend_and_a_label_change_is_one_small_record(backend, tmp_path):  # noqa: F811
    gpus = GpuState(tmp_path / "nvml", count=8)
    for k, gpu in enumerate(gpus.gpus):
        gpu["fabric"] = {"state": 3, "status": 0, "clique": 1 + k // 4, "cluster_uuid": CLUSTER}
    gpus.write()
    sysfs = FakeSysfs(tmp_path / "sys", gpus=8, nics=8)
    env = agent_env_for(
        backend,
        tmp_path,
        inventory_interval_sec=1,
        sysfs_root=sysfs.root,
        labels="rack=r12,row=3,zone=eu-1",
        docker_host=f"unix://{tmp_path}/no-engine.sock",  # the shared engine's containers come and go
    )
    env.update(gpus.env())
    agent = AgentProcess(env, tmp_path / "agent.log").start()
    try:
        node_id = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])["node_id"]
        (facts,) = [
            orjson.loads(row[0]) for row in stored(backend, "SELECT facts FROM nodes WHERE node_id = ?", node_id)
        ]
        assert facts["labels"] == {"rack": "r12", "row": "3", "zone": "eu-1"}
        # at enrollment: what sysfs shows (the GPUs by PCI address; NVML's part comes with the inventory)
        assert [g["pci_bus_id"] for g in facts["topology"]["gpus"]] == [gpu_bus_id(k) for k in range(8)]
        assert facts["topology"]["gpudirect"] == [[gpu_bus_id(k), f"mlx5_{k}"] for k in range(8)]

        inventory = wait_for(
            lambda: (i := backend.inventory(node_id).get("inventory")) and i.get("topology") and i, 30, 0.2, "inventory"
        )
        assert inventory["labels"] == {"rack": "r12", "row": "3", "zone": "eu-1"}
        topology = inventory["topology"]
        assert topology["gpus"][5] == {
            "index": 5,
            "uuid": "GPU-00000005-fake",
            "pci_bus_id": gpu_bus_id(5),
            "numa_node": 1,
            "pcie_switch": "0000:4a:00.0",
            "nvlink_clique": 2,
            "fabric_cluster": CLUSTER.replace("-", ""),
        }
        assert [(d["device"], d["pci_bus_id"], d["pcie_switch"]) for d in topology["rdma"]][:2] == [
            ("mlx5_0", nic_bus_id(0), "0000:40:00.0"),
            ("mlx5_1", nic_bus_id(1), "0000:42:00.0"),
        ]
        assert topology["rdma"][7]["ports"][0]["port_guid"] == port_guid(7)
        assert topology["ib_subnets"] == ["0xfe80000000000000"]
        assert topology["gpudirect"] == [[k, f"mlx5_{k}"] for k in range(8)]

        node = backend.node_by_agent(env["FADEN_NODE_AGENT_AGENT_ID"])
        assert node["labels"] == inventory["labels"] and node["topology"] == topology
        admin = subprocess.run(
            [sys.executable, "-m", "faden_agent", "admin", "nodes", "--url", backend.url],
            env={"FADEN_ADMIN_TOKEN": backend.admin_token, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "labels: rack=r12,row=3,zone=eu-1" in admin.stdout, admin.stdout
        assert (
            "topology: 8 GPUs in NVLink clique 1,2, 8 RDMA devices, IB subnet 0xfe80000000000000, 8 GPUDirect pairs"
        ) in admin.stdout
        status = wait_for(lambda: "topology:" in (s := cli(env, "status").stdout) and s, 20, 0.2, "status")
        assert "labels:        rack=r12,row=3,zone=eu-1" in status
        assert "topology:      8 GPUs in NVLink clique 1,2, 8 RDMA devices, IB subnet 0xfe80000000000000" in status
        # the heartbeats carry no `placement`: the backend has the inventory's sections
        row = next(w for w in node["workers"] if w["name"] == "inventory")
        assert "placement" not in row["status"] and "gauges" not in row["status"]

        agent.stop()
        before = len(inventory_records(backend))
        env["FADEN_NODE_AGENT_LABELS"] = "rack=r14,row=3,zone=eu-1"  # the machine moved racks
        restarted_at = time.time()
        agent = AgentProcess(env, tmp_path / "agent-2.log").start()
        wait_for(lambda: backend.inventory(node_id)["inventory"]["labels"]["rack"] == "r14", 30, 0.2, "the new label")
        # A usage-only record (`unchanged`) the first agent queued as it stopped may arrive now,
        # delivered by the second (nothing queued is lost); the second's own come after.
        after = [
            r
            for r in inventory_records(backend)[before:]
            if not (r["type"] == "unchanged" and r["collected_at"] < restarted_at)
        ]
        assert [r["type"] for r in after][:1] == ["changes"], [r["type"] for r in after]  # no full record
        change = after[0]
        assert [[["labels", "rack"], "r14"]] == [part for part in change["set"] if part[0][0] == "labels"]
        # this VM's interfaces may come and go with other work meanwhile; nothing else of the machine moved
        assert {part[0][0] for part in change.get("set", [])} <= {"labels", "network"}, change
        assert {path[0] for path in change.get("unset", [])} | {p[0][0] for p in change.get("splice", [])} <= {
            "network"
        }
        label_part = orjson.dumps([part for part in change["set"] if part[0][0] == "labels"])
        assert len(label_part) < 40  # the label itself, not the inventory
        assert backend.inventory(node_id)["inventory"]["topology"] == topology
    finally:
        agent.stop()
        agent.kill()
