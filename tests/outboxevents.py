"""The event records an agent's outbox holds, read from its state directory."""

from __future__ import annotations

from typing import Any

from faden_agent import protocol
from faden_agent.reports.outbox import Outbox


def outbox_events(state_dir, type_prefix: str) -> list[dict[str, Any]]:
    """The pending event rows whose data type starts with type_prefix, oldest first."""
    outbox = Outbox(state_dir)
    try:
        rows = outbox.pending(100_000)
    finally:
        outbox.close()
    return [r for r in rows if r["kind"] == protocol.EVENT and r["data"]["type"].startswith(type_prefix)]
