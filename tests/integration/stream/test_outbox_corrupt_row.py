"""One malformed outbox row does not take the node dark: rows edited with the real SQLite in
the running agent's outbox, and before it starts (not JSON, a flipped byte, a body that is no
text), are set aside and reported to the real reference backend as `agent.record_set_aside`;
heartbeats go on, the stream worker is never restarted, a command still runs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import agent_env_for, backend  # noqa: F401 - fixture


def corrupt(state_dir: Path, *bodies: object) -> None:
    """Rows as a bad disk or a bad hand leaves them, written beside the agent's own."""
    db = sqlite3.connect(state_dir / "outbox.sqlite", timeout=30)
    for n, body in enumerate(bodies):
        db.execute("INSERT INTO outbox (id, kind, body) VALUES (?, 'event', ?)", (f"bad-{n}-{id(body)}", body))
    db.commit()
    db.close()


def set_aside_events(backend, node_id: str) -> list[dict]:
    return [e["data"] for e in backend.events(node_id) if e["data"].get("type") == "agent.record_set_aside"]


def test_corrupt_outbox_rows_are_set_aside_and_the_node_keeps_beating(backend, tmp_path):  # noqa: F811
    env = agent_env_for(backend, tmp_path)
    state_dir = Path(env["FADEN_NODE_AGENT_STATE_PATH"]).parent
    agent = AgentProcess(env, tmp_path / "agent.log").start()
    try:
        node_id = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])["node_id"]
        agent.stop()
        corrupt(state_dir, b"{not json", b'{"id": "bad", "kind": "event", "ts": 1, "data": "x"}')  # before it starts
        agent.start()
        wait_for(lambda: len(set_aside_events(backend, node_id)) >= 2, 30, what="the rows before the start reported")
        stream_pid = agent.workers()["stream"]["pid"]
        flipped = b'{"id":"bad-1","kind":"event","ts":1.0,"data":{"type":"x"}}'.replace(b"bad-1", b"bad-\x01")
        corrupt(state_dir, flipped, 42, b"[]")  # while it runs
        beats = backend.admin.node(node_id)["heartbeats"]
        wait_for(lambda: len(set_aside_events(backend, node_id)) >= 5, 30, what="the rows written meanwhile reported")
        wait_for(lambda: backend.admin.node(node_id)["heartbeats"] >= beats + 3, 15, what="heartbeats go on")
        reasons = sorted(e["reason"] for e in set_aside_events(backend, node_id))
        print("set aside:", reasons)
        assert any("not JSON" in r for r in reasons) and any("not text" in r for r in reasons), reasons
        assert agent.workers()["stream"]["pid"] == stream_pid and agent.workers()["stream"]["restarts"] == 0
        done = backend.wait_command(backend.send_command(node_id, "no.such_kind"), timeout_s=30)
        assert done["state"] == "rejected", done  # the downlink and the executor still answer
    finally:
        agent.stop()
        agent.kill()
