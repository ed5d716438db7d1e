"""Node conditions as the tests see them: a real agent run as a context (stopped, then killed,
at its end), its inventory worker's held conditions and kernel line status (ps), and the
node.condition_changed events the reference backend holds for one condition."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from faden_agent.protocol import conditions as names
from tests.support.agentproc import AgentProcess
from tests.support.backendproc import BackendProcess


@contextmanager
def running(env: dict[str, str], log: Path) -> Iterator[AgentProcess]:
    agent = AgentProcess(env, log).start()
    try:
        yield agent
    finally:
        agent.stop()
        agent.kill()


def worker_status(agent: AgentProcess) -> dict:
    return (agent.workers().get("inventory") or {}).get("status") or {}


def held(agent: AgentProcess) -> dict:
    """The active conditions and their reasons, as the inventory worker's status says."""
    return worker_status(agent).get("conditions") or {}


def condition_events(backend: BackendProcess, node_id: str, name: str) -> list[dict]:
    return [
        e["data"]
        for e in backend.events(node_id)
        if e["data"].get("type") == names.CONDITION_CHANGED and e["data"]["condition"] == name
    ]
