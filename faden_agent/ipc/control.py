"""The supervisor's control requests (`ps`, `start`), as every client asks them.

One client (Control) and one timeout policy: PERSON_WAIT_S where a person waits (cli, status),
LOOP_WAIT_S inside a loop that must go on (heartbeat, executor). No answer in time, or a
garbled one, is None: the caller says so and goes on.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from faden_agent.config import Config
from faden_agent.ipc.endpoints import Endpoints
from faden_agent.ipc.envelope import EnvelopeError
from faden_agent.ipc.sockets import Requester

log = logging.getLogger(__name__)

PERSON_WAIT_S = 1.0
LOOP_WAIT_S = 0.5
PEER_WORKER = "peer"
LISTEN_WAIT_S = 3.0  # what ask_to_serve waits for the port at most (it blocks the executor's loop)
_listened = False  # the peer worker was seen listening once: started for good


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


def ask_to_serve(config: Config) -> bool:
    """Have the peer worker started and wait until it listens (at most LISTEN_WAIT_S);
    False when it does not (no supervisor, the port taken: the caller goes on as before).
    Costs nothing once the worker was seen listening."""
    global _listened
    if _listened:
        return True
    # The executor's loop sends no liveness while it waits here: stay well inside its hang timeout.
    wait_s = min(LISTEN_WAIT_S, config.worker_hang_timeout_sec / 2)
    deadline = time.monotonic() + wait_s
    control = Control(config.runtime_dir, LOOP_WAIT_S)
    try:
        if not control.start(PEER_WORKER):
            return False  # no supervisor answers, or one without a peer worker (an executor on its own)
        while time.monotonic() < deadline:
            rows = {row["name"]: row for row in ((control.ps() or {}).get("workers") or [])}
            status = (rows.get(PEER_WORKER) or {}).get("status") or {}
            if status.get("listening"):
                _listened = True
                return True
            if status.get("error"):
                log.warning("the peer worker does not listen: %s", status["error"])
                return False
            time.sleep(0.02)
    finally:
        control.close()
    log.warning("the peer worker did not listen within %.1f s", wait_s)
    return False
