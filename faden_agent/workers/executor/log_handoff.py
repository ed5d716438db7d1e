"""Before the executor removes a stopped managed container (container.remove, or a
container.run that replaces it), the log worker reads the container's remaining lines and
Loki accepts them: removing a crashed container never loses its last words.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from faden_agent.config import Config
from faden_agent.ipc import Endpoints, request

DRAIN_TIMEOUT_S = 10.0
ASK_TIMEOUT_S = 1.0
ASK_INTERVAL_S = 0.05
log = logging.getLogger(__name__)


def hand_over_logs(config: Config, container: Any, wait_s: float = DRAIN_TIMEOUT_S) -> bool:
    """Wait (at most `wait_s`) until the container's lines are shipped; whether they are."""
    state = container.attrs.get("State") or {}
    if state.get("Running"):
        return False
    endpoints = Endpoints(config.runtime_dir)
    address = endpoints.logs
    if not endpoints.socket_path(address).exists():
        return False  # no log worker (an executor-only agent): nothing to wait for
    started = time.monotonic()
    deadline = started + wait_s
    while True:
        left = deadline - time.monotonic()
        body = {"container_id": container.id, "started_at": state.get("StartedAt")}
        reply = request(address, "drain", body, timeout_s=min(ASK_TIMEOUT_S, max(left, 0.01)))
        if reply is None or reply.type != "drain":
            log.info("no drain answer from the log worker for %s; removing it without waiting", container.name)
            return False
        if (reply.body or {}).get("drained"):
            log.info("logs of %s shipped (%.2fs) before its removal", container.name, time.monotonic() - started)
            return True
        if time.monotonic() + ASK_INTERVAL_S >= deadline:
            log.warning("logs of %s not all shipped after %.1fs; removing it anyway", container.name, wait_s)
            return False
        time.sleep(ASK_INTERVAL_S)
