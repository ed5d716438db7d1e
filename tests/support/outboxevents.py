"""The event records an agent's outbox holds, read from its state directory."""

from __future__ import annotations

from typing import Any

from faden_agent import protocol
from faden_agent.backend.outbox import Outbox


def outbox_events(state_dir, type_prefix: str) -> list[dict[str, Any]]:
    """The pending event rows whose data type starts with type_prefix, oldest first."""
    return [r for r in _pending(state_dir) if r["kind"] == protocol.EVENT and r["data"]["type"].startswith(type_prefix)]


def outbox_rows(state_dir, kind: str) -> list[dict[str, Any]]:
    """The data of the pending records of one kind, oldest first."""
    return [r["data"] for r in _pending(state_dir) if r["kind"] == kind]


def _pending(state_dir) -> list[dict[str, Any]]:
    outbox = Outbox(state_dir)
    try:
        return outbox.pending(100_000)
    finally:
        outbox.close()
