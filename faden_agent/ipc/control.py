"""The supervisor's control requests (`ps`, `start`), as every client asks them.

One client (Control) and one timeout policy: PERSON_WAIT_S where a person waits (cli, status),
LOOP_WAIT_S inside a loop that must go on (heartbeat, executor). No answer in time, or a
garbled one, is None: the caller says so and goes on.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from faden_agent.ipc.endpoints import Endpoints
from faden_agent.ipc.envelope import EnvelopeError
from faden_agent.ipc.sockets import Requester

log = logging.getLogger(__name__)

PERSON_WAIT_S = 1.0
LOOP_WAIT_S = 0.5


class Control:
    """A kept connection to the supervisor's control socket (one thread only)."""

    def __init__(self, runtime_dir: Path, timeout_s: float = PERSON_WAIT_S):
        self._requester = Requester(Endpoints(runtime_dir).control)
        self.timeout_s = timeout_s

    def ps(self) -> dict[str, Any] | None:
        """The worker table (supervisor and workers), or None when no supervisor answers."""
        body = self._ask("ps")
        return body if isinstance(body, dict) else None

    def start(self, name: str) -> bool:
        """Ask for a dormant worker; False when no supervisor (or none with that worker) answers."""
        return self._ask("start", {"name": name}) is not None

    def close(self) -> None:
        self._requester.close()

    def _ask(self, op: str, body: Any = None) -> Any:
        try:
            reply = self._requester.ask(op, body, timeout_s=self.timeout_s)
        except EnvelopeError:
            return None
        return reply.body if reply is not None and reply.type == op else None


def ps(runtime_dir: Path, timeout_s: float = PERSON_WAIT_S) -> dict[str, Any] | None:
    """One `ps`, on a connection of its own."""
    control = Control(runtime_dir, timeout_s)
    try:
        return control.ps()
    finally:
        control.close()
