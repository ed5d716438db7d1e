"""When the peer worker runs (issue 16). It is a process of its own (about 5 MiB private
memory, a few wakeups a second) that only a machine serving peers needs, so with
PEER_START=on_demand (the default) the supervisor starts it when:

  - the backend put this machine in a cluster (the `peers` message kept in peers.json
    names one): peers may fetch from it at any time;
  - the executor is about to answer `image.serve` or grant a probe ticket: it asks the
    supervisor to start the worker (control request `start`) and waits until the port
    listens, so the receiver the backend sends next never finds it closed (ipc/control.py
    ask_to_serve);
  - a ticket is already waiting in the ticket box (one registered before a restart).

Once started it is never stopped; a crash restarts it like any worker.
"""

from __future__ import annotations

import os

from faden_agent.cluster import PeerFile
from faden_agent.config import Config
from faden_agent.peer.tickets import TICKET_DIR


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
