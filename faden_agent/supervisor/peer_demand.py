"""When the peer worker runs (issue 16). It is a process of its own (about 5 MiB private
memory, a few wakeups a second) that only a machine serving peers needs, so with
PEER_START=on_demand (the default) the supervisor starts it when:

  - the backend put this machine in a cluster (the `peers` message kept in peers.json
    names one): peers may fetch from it at any time;
  - the executor is about to answer `image.serve` or grant a probe ticket: it asks the
    supervisor to start the worker (control request `start`) and waits until the port
    listens, so the receiver the backend sends next never finds it closed (ask_to_serve);
  - a ticket is already waiting in the ticket box (one registered before a restart).

Once started it is never stopped; a crash restarts it like any worker.
"""

from __future__ import annotations

import logging
import os
import time

from faden_agent.cluster import PeerFile
from faden_agent.config import Config
from faden_agent.ipc import Endpoints, request
from faden_agent.peer.tickets import TICKET_DIR

log = logging.getLogger(__name__)

NAME = "peer"
LISTEN_WAIT_S = 3.0  # what ask_to_serve waits for the port at most (it blocks the executor's loop)
ASK_TIMEOUT_S = 0.5
_listened = False  # seen listening once: started for good (a crash restarts it as before)


class PeerDemand:
    """The supervisor's check, at each turn of its loop and at least every DORMANT_CHECK_S
    (arbiter.py): whether the peer worker is wanted now. A new cluster is served within
    that; image.serve and probe tickets ask at once (ask_to_serve)."""

    def __init__(self, config: Config):
        self.config = config
        self.peers = PeerFile(config.state_dir)

    def wanted(self) -> bool:
        if self.config.peer_start == "always":
            return True
        self.peers.refresh()  # re-reads the file only when it changed
        if self.peers.cluster is not None:
            return True
        try:
            return any(not name.startswith(".") for name in os.listdir(self.config.runtime_dir / TICKET_DIR))
        except OSError:
            return False


def ask_to_serve(config: Config) -> bool:
    """Have the peer worker started and wait until it listens (at most LISTEN_WAIT_S);
    False when it does not (no supervisor, the port taken: the caller goes on as before).
    Costs nothing once the worker was seen listening."""
    global _listened
    if _listened:
        return True
    control = Endpoints(config.runtime_dir).control
    # The executor's loop sends no liveness while it waits here: stay well inside its hang timeout.
    wait_s = min(LISTEN_WAIT_S, config.worker_hang_timeout_sec / 2)
    deadline = time.monotonic() + wait_s
    asked = False
    while time.monotonic() < deadline:
        if not asked:
            answer = request(control, "start", {"name": NAME}, timeout_s=ASK_TIMEOUT_S)
            if answer is None or answer.type != "start":
                return False  # no supervisor answers, or one without a peer worker (an executor on its own)
            asked = True
        reply = request(control, "ps", timeout_s=ASK_TIMEOUT_S)
        rows = {row["name"]: row for row in (reply.body.get("workers") or [])} if reply is not None else {}
        status = (rows.get(NAME) or {}).get("status") or {}
        if status.get("listening"):
            _listened = True
            return True
        if status.get("error"):
            log.warning("the peer worker does not listen: %s", status["error"])
            return False
        time.sleep(0.02)
    log.warning("the peer worker did not listen within %.1f s", wait_s)
    return False
