"""Inventory between a real agent (C-level NVML, tests/nvml) and the real reference backend:
a change goes as a changes record the backend applies; a backend restored from an
older copy of its store falls behind, asks with `inventory.full` and holds the machine again
once the full record arrives."""

from __future__ import annotations

import shutil
import sqlite3

import orjson
import pytest

from tests.nvml.state import GpuState
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import agent_env_for, backend  # noqa: F401 - the fixture

pytestmark = pytest.mark.docker


def stored_types(backend) -> list[str]:
    db = sqlite3.connect(backend.data_dir / "backend.sqlite")
    try:
        rows = db.execute("SELECT data FROM records WHERE kind = 'inventory' ORDER BY received_at").fetchall()
    finally:
        db.close()
    return [orjson.loads(row[0])["type"] for row in rows]


def pcie_width(backend, node_id: str, gpu: int) -> int | None:
    inventory = backend.inventory(node_id).get("inventory") or {}
    devices = (inventory.get("gpu") or {}).get("devices") or []
    return devices[gpu]["health"]["pcie"]["width"] if len(devices) > gpu else None


def test_changes_reach_the_backend_and_a_restored_one_asks_for_a_full_record(backend, tmp_path):
    gpus = GpuState(tmp_path / "nvml", count=2)
    env = agent_env_for(backend, tmp_path, inventory_interval_sec=1, inventory_usage_sec=2)
    env.update(gpus.env())
    agent = AgentProcess(env, tmp_path / "agent.log").start()
    try:
        node_id = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"], timeout_s=30)["node_id"]
        wait_for(lambda: pcie_width(backend, node_id, 1) == 16, 30, 0.2, "the first inventory")
        backend.stop()
        shutil.copytree(backend.data_dir, tmp_path / "backup")  # the store as it is now
        backend.start()
        held_before = len(stored_types(backend))

        gpus.gpus[1]["pcie"]["width"] = 8
        gpus.write()
        wait_for(lambda: pcie_width(backend, node_id, 1) == 8, 30, 0.2, "the change at the backend")
        assert "changes" in stored_types(backend) and stored_types(backend).count("full") == 1

        gpus.gpus[0]["pcie"]["width"] = 4  # a change the restored store cannot place
        gpus.write()
        wait_for(lambda: pcie_width(backend, node_id, 0) == 4, 30, 0.2, "the change at the backend")
        backend.stop()
        shutil.rmtree(backend.data_dir)
        shutil.copytree(tmp_path / "backup", backend.data_dir)  # restored: it holds width 16, 16
        backend.start()
        gpus.gpus[1]["pcie"]["width"] = 2
        gpus.write()
        wait_for(
            lambda: (pcie_width(backend, node_id, 0), pcie_width(backend, node_id, 1)) == (4, 2),
            45,
            0.2,
            "the machine as it is, after the backend asked for a full record",
        )
        after_restore = stored_types(backend)[held_before:]
        assert "changes" in after_restore and after_restore.count("full") == 1, after_restore
    finally:
        agent.stop()
        agent.kill()
