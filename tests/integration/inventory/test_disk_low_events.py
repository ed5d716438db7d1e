"""disk.low / disk.recovered from a real inventory worker under its supervisor: the Ray
log directory on a small tmpfs is filled and emptied again; the events name the biggest
consumers (the Ray logs among them, measured)."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest

from tests.support.agentproc import agent_env, wait_for
from tests.support.outboxevents import outbox_events
from tests.support.sampleworkers import supervisor_argv

pytestmark = pytest.mark.docker

INVENTORY_ONLY = supervisor_argv({"inventory": "faden_agent.workers.inventory.worker:InventoryWorker"})
MiB = 1 << 20


def disk_events(state_dir):
    return outbox_events(state_dir, "disk.")


@pytest.fixture
def small_ray_dir(tmp_path):
    ray = tmp_path / "ray"
    ray.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(ray)], check=True)
    yield ray
    subprocess.run(["umount", "-l", str(ray)], check=False)


def test_low_then_recovered_naming_the_consumers(tmp_path, agent_factory, small_ray_dir):
    env = agent_env(tmp_path, inventory_interval_sec=1, ray_log_dir=small_ray_dir)
    agent = agent_factory(env, argv=INVENTORY_ONLY).start()
    state_dir = tmp_path / "state"
    wait_for(lambda: agent.workers().get("inventory", {}).get("state") == "RUNNING", 30, what="the inventory worker")
    assert disk_events(state_dir) == []  # 64 MiB free of 64: not low
    session = small_ray_dir / "node-1" / "session_latest" / "logs"
    session.mkdir(parents=True)
    with open(session / "raylet.out", "wb") as out:
        out.write(os.urandom(60 * MiB))  # 4 MiB left: under 10 % of 64 MiB (6.4 MiB)

    (low,) = wait_for(lambda: disk_events(state_dir), 30, what="a disk.low event")
    data = low["data"]
    assert data["type"] == "disk.low" and "ray_logs" in data["roles"], data
    assert data["mountpoint"] == str(small_ray_dir) and data["threshold_bytes"] == int(64 * MiB * 0.10)
    assert data["free_bytes"] < data["threshold_bytes"] and data["total_bytes"] == 64 * MiB
    consumers = {c["what"]: c for c in data["consumers"]}
    assert set(consumers) == {"ray_logs", "images", "container_logs"}, data["consumers"]
    assert consumers["ray_logs"]["bytes"] >= 60 * MiB and consumers["images"]["bytes"] > 0
    assert [c["bytes"] for c in data["consumers"]] == sorted((c["bytes"] for c in data["consumers"]), reverse=True)

    (session / "raylet.out").unlink()
    events = wait_for(lambda: [e for e in disk_events(state_dir) if e["data"]["type"] == "disk.recovered"], 30)
    assert events[0]["data"]["free_bytes"] >= 60 * MiB
    assert [e["data"]["type"] for e in disk_events(state_dir)] == ["disk.low", "disk.recovered"]  # once each


def run_doctor(env: dict[str, str]) -> dict[str, dict]:
    done = subprocess.run(
        [sys.executable, "-m", "faden_agent", "doctor", "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    return {c["name"]: c for c in orjson.loads(done.stdout)["checks"]}


def test_doctor_says_low_with_the_same_threshold_and_consumers(tmp_path):
    ray = tmp_path / "ray"
    ray.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1g", "tmpfs", str(ray)], check=True)
    try:
        subprocess.run(["fallocate", "-l", "700m", str(ray / "raylet.out")], check=True)
        # 324 MiB free of 1 GiB: low at a 50 % threshold, not at the default 10 %
        checks = run_doctor(agent_env(tmp_path, ray_log_dir=ray, disk_low_percent=50))
        low = checks["disk (ray logs)"]
        assert low["status"] == "warn", low
        assert "low (under 0.5 GiB)" in low["detail"] and "ray_logs 0.7 GiB" in low["detail"], low
        assert "images" in low["detail"] and "image.prune" in low["hint"]
        assert checks["disk (state)"]["status"] == "ok"  # the same rule, a disk with room
        assert run_doctor(agent_env(tmp_path, ray_log_dir=ray))["disk (ray logs)"]["status"] == "ok"
    finally:
        subprocess.run(["umount", "-l", str(ray)], check=False)
