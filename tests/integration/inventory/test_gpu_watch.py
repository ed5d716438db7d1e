"""Blind to nothing, in a real agent on tests/nvml's C GPUs: a GPU answering NVML_ERROR_UNKNOWN
on every call is failed while an Xid on another is an event within 2 s (the status names the
GPUs watched); a hung NVML call fails its GPU within two heartbeat intervals at the defaults; a
hung event wait is a node reason; a GPU swapped in its slot is `replaced`, the node ok; a
stopped fabric manager is a node reason."""

from __future__ import annotations

import time

import pytest

from tests.nvml.state import GpuState
from tests.support.agentproc import wait_for
from tests.support.gpuagent import gpu_events, health_events, newest_gpu, start

pytestmark = pytest.mark.docker


def test_a_gpu_failing_every_call_is_failed_and_blinds_no_other(tmp_path, agent_factory):
    gpus = GpuState(tmp_path / "nvml", count=3)
    gpus.gpus[1]["fail_all"] = 999  # "Unable to determine the device handle for GPU ...: Unknown Error"
    gpus.write()
    # no interval round for a minute: only the event thread can bring an Xid in
    agent, state_dir, first = start(tmp_path, agent_factory, gpus, inventory_interval_sec=60)
    bad = first["devices"][1]
    assert (bad["state"], bad["error"]) == ("error", "Unknown Error")
    assert bad["health"]["verdict"] == "failed"
    assert bad["health"]["reasons"] == ["NVML: Unknown Error on every call"]
    watch = wait_for(lambda: agent.workers()["inventory"]["status"]["gpu_events"]["watching"], 10, what="the watch")
    assert watch == [0, 2]
    status = agent.workers()["inventory"]["status"]["gpu_events"]
    assert status["unwatched"] == {"1": "Unknown Error"} and status["lost"] == []
    events_before = len(health_events(state_dir))

    gpus.xid(2, 79)
    written = time.monotonic()
    event = wait_for(
        lambda: [e for e in health_events(state_dir)[events_before:] if e["index"] == 2],
        2,
        interval_s=0.02,
        what="GPU 2's Xid as an event within 2 s",
    )[0]
    print(f"Xid on GPU 2 to its event beside a 999 GPU: {time.monotonic() - written:.2f} s")
    assert (event["new"], event["reasons"]) == ("failed", ["Xid 79: GPU has fallen off the bus (reboot needed)"])
    gpu = newest_gpu(state_dir)
    assert "GPU 1: NVML: Unknown Error on every call" in gpu["health"]["reasons"]

    gpus.gpus[1]["fail_all"] = 0  # it answers again: watched again, and its verdict back
    gpus.write()
    wait_for(
        lambda: agent.workers()["inventory"]["status"]["gpu_events"]["watching"] == [0, 1, 2], 10, what="watched again"
    )


def test_a_hung_call_fails_its_gpu_within_two_heartbeat_intervals_at_the_defaults(tmp_path, agent_factory):
    gpus = GpuState(tmp_path / "nvml", count=2)
    # the defaults: heartbeats every 15 s, a full round every 60 s, 10 s for an NVML call
    agent, state_dir, first = start(tmp_path, agent_factory, gpus, inventory_interval_sec=60, inventory_usage_sec=300)
    assert agent.env.get("FADEN_NODE_AGENT_HEARTBEAT_INTERVAL_SEC") is None
    gpus.gpus[1]["hang_ms"] = {"nvmlDeviceGetFieldValues": 120_000}  # a driver that stopped answering
    gpus.write()
    hung_at = time.monotonic()
    event = wait_for(lambda: health_events(state_dir), 40, interval_s=0.1, what="the hung GPU's event")[0]
    took = time.monotonic() - hung_at
    print(f"a hung NVML call to its GPU's failed event: {took:.1f} s (two heartbeat intervals: 30 s)")
    assert (event["index"], event["uuid"], event["new"]) == (1, first["devices"][1]["uuid"], "failed")
    assert event["reasons"] == ["NVML call hung: nvmlDeviceGetFieldValues"]
    assert took <= 30.0
    worker = agent.workers()["inventory"]
    assert worker["state"] == "RUNNING" and worker["restarts"] == 0


def test_a_hung_event_wait_is_a_node_reason(tmp_path, agent_factory):
    gpus = GpuState(tmp_path / "nvml", count=1)
    agent, state_dir, _ = start(tmp_path, agent_factory, gpus, inventory_probe_timeout_sec=2)
    wait_for(lambda: agent.workers()["inventory"]["status"]["gpu_events"]["watching"] == [0], 10, what="watched")
    gpus.top["hang_ms"] = {"nvmlEventSetWait_v2": 60_000}  # the next wait does not come back
    gpus.write()
    gpu = wait_for(lambda: newest_gpu(state_dir)["health"]["reasons"] and newest_gpu(state_dir), 20, what="reason")
    seen = time.monotonic()
    (reason,) = gpu["health"]["reasons"]
    assert gpu["health"]["verdict"] == "degraded" and reason.startswith(
        "GPU events not watched: NVML call hung: nvmlEventSetWait_v2 ("
    )
    # ps shows the status last sent, which may be older than the round that found the hang:
    # one sent after the record was seen names it (the wait still hangs, for a minute)
    status = agent.row_sent_after("inventory", seen)["status"]
    assert status["gpu_events"]["hung"].startswith("nvmlEventSetWait_v2"), status["gpu_events"]


def test_a_gpu_swapped_in_its_slot_is_replaced_and_the_node_stays_ok(tmp_path, agent_factory):
    gpus = GpuState(tmp_path / "nvml", count=3)
    agent, state_dir, first = start(tmp_path, agent_factory, gpus)
    old = gpus.gpus[1]["uuid"]
    gpus.gpus[1]["uuid"] = "GPU-5a5a5a5a-new-board"  # the same slot, the same bus id, another board
    gpus.write()
    (replaced,) = wait_for(lambda: gpu_events(state_dir, "gpu.replaced"), 15, what="the replaced event")
    assert replaced == {
        **replaced,
        "old_uuid": old,
        "new_uuid": "GPU-5a5a5a5a-new-board",
        "index": 1,
        "pci_bus_id": first["devices"][1]["pci_bus_id"],
    }
    gpu = wait_for(lambda: newest_gpu(state_dir)["devices"][1]["uuid"] != old and newest_gpu(state_dir), 10, what="rec")
    assert gpu["health"] == {"verdict": "ok", "reasons": []} and "missing" not in gpu
    assert health_events(state_dir) == []

    # swapped while the agent was down: the evidence of the old one meets the new one at start
    agent.stop()
    gpus.gpus[2]["uuid"] = "GPU-7b7b7b7b-new-board"
    gpus.write()
    again = agent_factory(agent.env).start()
    replaced = wait_for(lambda: gpu_events(state_dir, "gpu.replaced")[1:], 30, what="the second replaced event")[0]
    assert (replaced["old_uuid"], replaced["new_uuid"]) == (first["devices"][2]["uuid"], "GPU-7b7b7b7b-new-board")
    wait_for(lambda: again.workers()["inventory"]["status"]["cycles"] >= 3, 30, what="three rounds")
    assert newest_gpu(state_dir)["health"] == {"verdict": "ok", "reasons": []} and health_events(state_dir) == []


def test_a_stopped_fabric_manager_is_a_node_reason(tmp_path, agent_factory):
    gpus = GpuState(tmp_path / "nvml", count=2)  # H100s on an NVSwitch fabric (fabric state completed)
    agent, state_dir, first = start(tmp_path, agent_factory, gpus)
    assert first["fabric_manager"] == {
        "active": True,
        "state": "active (running)",
        "version": "550.54.15",
        "driver_version": "550.54.15",
    }
    gpus.fabric_manager.update(ActiveState="inactive", SubState="dead")
    gpus.write()
    gpu = wait_for(lambda: newest_gpu(state_dir)["health"]["reasons"] and newest_gpu(state_dir), 15, what="reason")
    assert gpu["health"] == {
        "verdict": "failed",
        "reasons": ["fabric manager not running (nvidia-fabricmanager: inactive (dead))"],
    }
    assert [d["health"]["verdict"] for d in gpu["devices"]] == ["ok", "ok"]  # each GPU reads fine: the node cannot
    gpus.fabric_manager.update(ActiveState="active", SubState="running", version="535.104.05")
    gpus.write()
    gpu = wait_for(lambda: "535" in str(newest_gpu(state_dir)["health"]) and newest_gpu(state_dir), 15, what="version")
    assert gpu["health"]["reasons"] == ["fabric manager 535.104.05 does not match the driver 550.54.15"]
    gpus.fabric_manager.update(version="550.54.15")
    gpus.write()
    wait_for(lambda: newest_gpu(state_dir)["health"]["verdict"] == "ok", 15, what="ok again")
