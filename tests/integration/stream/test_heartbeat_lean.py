"""Lean heartbeats against the real reference backend: beats carry the worker table only when
it changed and at the slow full refresh, and the backend's node view keeps the table
throughout (the console reads it from there)."""

from __future__ import annotations

import os
import signal
import time

from faden_agent.workers.stream.heartbeat import detail_changes
from tests.nvml.state import GpuState
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import agent_env_for, agent_on_backend, backend  # noqa: F401

FULL_S = 4.0


def workers_seen(backend, node_id):
    node = next(n for n in backend.nodes() if n["node_id"] == node_id)
    return {w["name"]: w for w in node.get("workers") or []}


def test_worker_table_reaches_the_backend_on_change_and_at_the_full_refresh(backend, agent_on_backend):
    agent, node = agent_on_backend(heartbeat_interval_sec=0.5, heartbeat_full_sec=FULL_S)
    node_id = node["node_id"]
    names = set(agent.wait_all_running())
    wait_for(
        lambda: (
            set(workers_seen(backend, node_id)) == names
            and all(w["state"] == "RUNNING" for w in workers_seen(backend, node_id).values())
        ),
        30,
        what=f"all workers {sorted(names)} RUNNING at the backend",
    )

    # quiet: most beats are lean, the backend still holds the table
    start = len(backend.heartbeats(node_id))
    wait_for(lambda: len(backend.heartbeats(node_id)) >= start + 4, 20, what="four more beats")
    recent = backend.heartbeats(node_id)[start:]
    lean = [b for b in recent if "workers" not in b["data"]]
    assert lean and all({"beat", "due_at", "uptime_s"} <= set(b["data"]) for b in lean)
    assert set(workers_seen(backend, node_id)) == names

    # a change (a worker killed and restarted) goes with the next beat, not at the refresh
    old_pid = agent.workers()["inventory"]["pid"]
    os.kill(old_pid, signal.SIGKILL)
    restarted = wait_for(
        lambda: (
            (w := workers_seen(backend, node_id).get("inventory"))
            and w["pid"] not in (None, old_pid)
            and w["restarts"] >= 1
            and w
        ),
        FULL_S * 0.75,
        interval_s=0.1,
        what="the restarted inventory worker at the backend before a refresh",
    )
    assert restarted["state"] in ("STARTING", "RUNNING")

    # the slow refresh: an unchanged table is sent again, with its numbers up to date
    wait_for(lambda: workers_seen(backend, node_id)["inventory"]["state"] == "RUNNING", 10, what="RUNNING seen")
    uptime = workers_seen(backend, node_id)["inventory"]["uptime_s"] or 0.0
    wait_for(
        lambda: (workers_seen(backend, node_id)["inventory"]["uptime_s"] or 0.0) > uptime + 1,
        FULL_S * 3,
        interval_s=0.2,
        what="a full refresh with the table's numbers",
    )
    beats = backend.heartbeats(node_id)
    assert set(workers_seen(backend, node_id)) == names and any("workers" not in b["data"] for b in beats[-3:])


def test_the_first_beat_waits_for_the_tree_and_the_next_ones_are_lean(backend, agent_on_backend):
    """Beat 0 carries the table as it stays (every worker RUNNING with its first status, the
    link connected), not a snapshot of workers still starting that the next beat would send
    again in full (uplink in the window after start). A later beat carries the
    detail again only for a real change, which this shared machine can make (an engine slow
    to answer, a probe overrun): never for the start-up's own states."""
    agent, node = agent_on_backend(heartbeat_interval_sec=6, worker_liveness_sec=0.3, inventory_interval_sec=60)
    node_id = node["node_id"]
    wait_for(lambda: len(backend.heartbeats(node_id)) >= 3, 60, what="three beats")
    beats = [b["data"] for b in backend.heartbeats(node_id)]
    first = beats[0]
    assert first["beat"] == 0 and "workers" in first
    rows = {w["name"]: w for w in first["workers"]}
    assert {name: row["state"] for name, row in rows.items()} == {name: "RUNNING" for name in agent.workers()}
    assert first["connection"]["state"] == "connected"
    # the first work's outcome, not the status a worker starts with
    assert rows["executor"]["status"]["docker"] != "unknown" and rows["executor"]["status"]["events"] is not None
    assert rows["inventory"]["status"]["records"]["full"] >= 1
    # the form the backend's hello set: read a round later, it would flip (a detail beat) at 60 s
    assert rows["inventory"]["status"]["form"] == "changes"
    assert "gauges" not in rows["inventory"]["status"]  # /metrics' figures stay home
    for beat in (b for b in beats[1:3] if "workers" in b):
        changed = detail_changes(first, beat)
        assert not any(c.endswith(".state") or c == "connection" or c.startswith("nothing") for c in changed), (
            beat["beat"],
            changed,
        )


def test_the_first_beat_waits_for_a_slow_first_inventory_round(backend, tmp_path):
    """An inventory whose first round takes about 2 s (each of four GPUs' temperature read
    hangs 500 ms in tests/nvml's C library): its status says `starting` until the round is done,
    and beat 0 waits for it, not for two still samples of a tree that has collected nothing."""
    gpus = GpuState(tmp_path / "nvml", count=4)
    gpus.top["hang_ms"] = {"nvmlDeviceGetTemperature": 500}
    gpus.write()
    env = agent_env_for(
        backend, tmp_path / "agent", heartbeat_interval_sec=8, worker_liveness_sec=0.3, inventory_interval_sec=60
    )
    env.update(gpus.env())
    agent = AgentProcess(env, tmp_path / "agent.log").start(wait_running=False)
    try:
        node = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])
        first = wait_for(lambda: backend.heartbeats(node["node_id"]), 30, what="beat 0")[0]["data"]
        inventory = {w["name"]: w for w in first["workers"]}["inventory"]["status"]
        assert inventory["cycles"] >= 1 and "starting" not in inventory, inventory
        assert inventory["last_age_s"] is not None
    finally:
        agent.stop()


def test_a_stopped_supervisor_neither_stalls_the_beats_nor_blanks_the_table(backend, agent_on_backend):
    """The beats come from the stream worker and go on while the supervisor is stopped
    (SIGSTOP). Its `ps` then goes unanswered: those beats are pulses, not a detail with no
    workers, which would blank the table the console reads from the backend."""
    agent, node = agent_on_backend(heartbeat_interval_sec=0.5)
    node_id = node["node_id"]
    names = set(agent.wait_all_running())
    wait_for(lambda: set(workers_seen(backend, node_id)) == names, 30, what="the worker table at the backend")
    start = len(backend.heartbeats(node_id))
    os.kill(agent.pid, signal.SIGSTOP)
    try:
        time.sleep(3.0)
        during = [b["data"] for b in backend.heartbeats(node_id)[start:]]
        seen_during = set(workers_seen(backend, node_id))
    finally:
        os.kill(agent.pid, signal.SIGCONT)
    assert len(during) >= 3, f"{len(during)} beats in 3 s with the supervisor stopped"
    assert not any("workers" in b and not b["workers"] for b in during), [b.get("workers") for b in during]
    assert seen_during == names
    agent.wait_all_running()
    assert set(workers_seen(backend, node_id)) == names
