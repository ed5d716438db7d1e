"""Test helpers for the executor: run the real supervisor with only the executor worker
(or the whole agent), hand it commands over its real REQ socket exactly as the stream
worker does, and read its timeline/event records from the real outbox file."""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path
from typing import Any

from faden_agent import protocol
from faden_agent.ipc import request
from faden_agent.outbox import Outbox
from tests.agentproc import AgentProcess, wait_for

EXECUTOR_ONLY = [
    sys.executable, "-c",
    "import sys\n"
    "from faden_agent.config import load_config\n"
    "from faden_agent.logsetup import configure_logging\n"
    "from faden_agent.supervisor import Supervisor\n"
    "config = load_config()\n"
    "configure_logging(config.log_level, 'faden-agent')\n"
    "sys.exit(Supervisor(config, workers={'executor': 'faden_agent.workers.executor:ExecutorWorker'}).run())\n",
]


def unique_prefix() -> str:
    return f"fx-{uuid.uuid4().hex[:8]}"


class ExecutorClient:
    """Talks to one agent's executor and reads what it reported."""

    def __init__(self, agent: AgentProcess):
        self.agent = agent
        self.state_dir = Path(agent.env["FADEN_NODE_AGENT_STATE_PATH"]).parent
        self._seq = 0

    def send(self, command_id: str, kind: str, spec: Any, deadline: float | None = None,
             timeout_s: float = 5.0) -> dict[str, Any]:
        self._seq += 1
        body = {"id": command_id, "seq": self._seq, "kind": kind, "spec": spec, "deadline": deadline}
        reply = request(self.agent.endpoints.executor, "command", body, timeout_s=timeout_s)
        assert reply is not None, f"the executor did not ack {command_id} within {timeout_s}s"
        assert reply.type == "ack", reply
        return reply.body

    def records(self, kind: str | None = None) -> list[dict[str, Any]]:
        outbox = Outbox(self.state_dir)
        try:
            rows = outbox.pending(1_000_000)
        finally:
            outbox.close()
        return [r for r in rows if kind is None or r["kind"] == kind]

    def timeline(self, command_id: str) -> list[dict[str, Any]]:
        return [r for r in self.records(protocol.TIMELINE) if r["data"]["command_id"] == command_id]

    def states(self, command_id: str) -> list[str]:
        return [r["data"]["state"] for r in self.timeline(command_id)]

    def terminal(self, command_id: str) -> dict[str, Any] | None:
        for record in self.timeline(command_id):
            if record["data"]["state"] in protocol.TERMINAL_STATES:
                return record["data"]
        return None

    def wait_terminal(self, command_id: str, timeout_s: float = 30.0) -> dict[str, Any]:
        return wait_for(lambda: self.terminal(command_id), timeout_s, interval_s=0.05,
                        what=f"a terminal timeline state of {command_id}")

    def run(self, command_id: str, kind: str, spec: Any, timeout_s: float = 30.0, **kw: Any) -> dict[str, Any]:
        ack = self.send(command_id, kind, spec, **kw)
        assert ack["accepted"], ack
        return self.wait_terminal(command_id, timeout_s)

    def events(self, action: str | None = None) -> list[dict[str, Any]]:
        return [r["data"] for r in self.records(protocol.EVENT) if action is None or r["data"].get("action") == action]


def wait_executor_ready(client: ExecutorClient, timeout_s: float = 20.0) -> None:
    """The REP socket answers (a command.cancel of an unknown id is cheap and harmless)."""
    probe = f"probe-{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            client.send(probe, "command.cancel", {"command_id": "none"}, timeout_s=1.0)
            return
        except AssertionError:
            continue
    raise AssertionError("the executor never answered")
