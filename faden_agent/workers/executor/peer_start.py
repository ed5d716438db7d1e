"""The executor's one request to the supervisor: have the peer worker (started on demand)
listening before a command that needs it (image.serve, traffic.serve) answers."""

from __future__ import annotations

import logging
import time

from faden_agent.config import Config
from faden_agent.ipc.control import LOOP_WAIT_S, Control

log = logging.getLogger(__name__)

PEER_WORKER = "peer"
LISTEN_WAIT_S = 3.0  # what ask_to_serve waits for the port at most (it blocks the executor's loop)
_listened = False  # the peer worker was seen listening once: started for good


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
