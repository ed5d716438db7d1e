"""The inventory worker inside the real agent: a full inventory record lands in the outbox
at start, and an engine that accepts connections but never answers (a hung dockerd) is
reported as an overrun probe while the worker keeps reporting and heartbeating."""

from __future__ import annotations

import time

import pytest

from faden_agent import protocol
from faden_agent.backend.outbox import Outbox
from tests.support.agentproc import agent_env, wait_for
from tests.support.silentserver import SilentServer

pytestmark = pytest.mark.docker


def inventory_records(state_dir):
    outbox = Outbox(state_dir)
    try:
        return [r for r in outbox.pending(1000) if r["kind"] == protocol.INVENTORY]
    finally:
        outbox.close()


def test_full_record_at_start(tmp_path, agent_factory, docker_client):
    env = agent_env(tmp_path, inventory_interval_sec=60)
    agent = agent_factory(env).start()
    state_dir = tmp_path / "state"
    records = wait_for(lambda: inventory_records(state_dir), 20, what="an inventory record")
    data = records[0]["data"]
    assert data["type"] == "full" and records[0]["id"].startswith("inv:")
    assert data["host"]["memory_total"] > 0 and data["disks"] and data["network"]
    assert data["docker"]["engine_version"] == docker_client.version()["Version"]
    assert data["gpu"] == {
        "available": False,
        "reason": "NVML library not found",
        "driver_version": None,
        "cuda_driver_version": None,
        "nvml_version": None,
        "devices": [],
        "health": {"verdict": "ok", "reasons": []},  # no NVML here: a reason, not a failure
    }
    assert all(p["status"] == "ok" for p in data["probes"].values())
    assert agent.workers()["inventory"]["state"] == "RUNNING"


def test_a_hung_engine_is_an_overrun_and_the_worker_keeps_going(tmp_path, agent_factory):
    engine = SilentServer.unix(tmp_path / "hung-docker.sock")  # a hung dockerd
    env = agent_env(
        tmp_path,
        inventory_interval_sec=0.5,
        inventory_usage_sec=0.5,
        inventory_probe_timeout_sec=2,
        docker_host=f"unix://{engine.path}",
    )
    try:
        started = time.monotonic()
        agent = agent_factory(env).start()
        state_dir = tmp_path / "state"
        first = wait_for(lambda: inventory_records(state_dir), 20, what="an inventory record")[0]["data"]
        assert first["type"] == "full"
        assert first["probes"]["docker"]["status"] == "overrun" and first["docker"] is None
        assert first["probes"]["host"]["status"] == "ok" and first["host"]["cpu_logical"] > 0

        # Later cycles still come, and the docker probe is still the same stuck call. Other
        # tests' containers may flip docker0's link state meanwhile (a real change, hence a
        # full record; on a busy 2-core CI machine every cycle for seconds on end), so the
        # test waits for a quiet cycle's unchanged record rather than expecting one within 3 s,
        # and reads the newest full record, whatever its hash.
        def an_unchanged_record_3s_later():
            rows = [r["data"] for r in inventory_records(state_dir)]
            later = max(r["collected_at"] for r in rows) > first["collected_at"] + 3
            return later and any(r["type"] == "unchanged" for r in rows) and rows

        rows = wait_for(an_unchanged_record_3s_later, 45, what="an unchanged record 3 s after the first")
        newest_full = [r for r in rows if r["type"] == "full"][-1]
        assert newest_full["probes"]["docker"]["status"] == "overrun"
        assert newest_full["probes"]["docker"]["since"] == first["probes"]["docker"]["since"]
        worker = agent.workers()["inventory"]
        assert worker["state"] == "RUNNING" and worker["restarts"] == 0
        assert worker["heartbeat_age_s"] < 2
        assert "docker" in worker["status"]["overrun"] and worker["status"]["cycles"] >= 3
        # One stuck probe call, the change watcher's attempts (each waits out its 10 s client
        # timeout before the next) and the workload scraper's container listings (one per
        # WORKLOAD_SCRAPE_SEC, 15 s): no pile-up of connections. Each attempt of a client not
        # yet negotiated is two connections: its bounded /version read, then the request.
        elapsed = time.monotonic() - started
        attempts = 1 + (1 + int(elapsed // 10)) + (1 + int(elapsed // 15))
        assert 1 <= engine.peers.count(worker["pid"]) <= 2 * attempts, engine.peers
    finally:
        engine.close()
