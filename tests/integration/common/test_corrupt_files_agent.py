"""A corrupt outbox, command journal and log positions at start: the agent runs,
reports each quarantine to the backend, and accepts commands. Real agent, real backend."""

from __future__ import annotations

from faden_agent import protocol
from faden_agent.backend.outbox import OUTBOX_FILE
from faden_agent.config import load_config
from faden_agent.workers.executor.journal import JOURNAL_FILE
from faden_agent.workers.logs.positions import POSITIONS_FILE
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import agent_env_for, backend  # noqa: F401

GARBAGE = b"\x00\xffnot sqlite at all" * 500


def test_corrupt_outbox_journal_and_positions_at_start_are_quarantined_reported_and_work_goes_on(backend, tmp_path):
    env = agent_env_for(backend, tmp_path)
    state_dir = load_config(env).state_dir
    with AgentProcess(env, tmp_path / "first.log"):
        node = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])
    for name in (OUTBOX_FILE, JOURNAL_FILE):
        (state_dir / name).write_bytes(GARBAGE)
        for side in ("-wal", "-shm"):  # a WAL of whole pages would still hold a good database
            (state_dir / (name + side)).unlink(missing_ok=True)
    (state_dir / POSITIONS_FILE).write_bytes(b'{"journal": ')
    with AgentProcess(env, tmp_path / "second.log") as agent:

        def quarantines():
            found = {
                e["data"]["file"]: e["data"]
                for e in backend.events(node["node_id"])
                if (e.get("data") or {}).get("type") == "agent.file_quarantined"
            }
            return found if len(found) == 3 else None

        reported = wait_for(quarantines, 30, what="three quarantine events at the backend")
        assert set(reported) == {"outbox", "command journal", "log positions"}
        for name in (OUTBOX_FILE, JOURNAL_FILE, POSITIONS_FILE):
            moved = [p for p in state_dir.iterdir() if p.name.startswith(f"{name}.corrupt-")]
            assert len(moved) == 1, name
        command_id = backend.send_command(node["node_id"], "no.such.kind")
        assert backend.wait_command(command_id)["state"] == protocol.REJECTED
        rows = agent.workers()
        assert all(row["state"] == "RUNNING" and row["restarts"] == 0 for row in rows.values()), rows
