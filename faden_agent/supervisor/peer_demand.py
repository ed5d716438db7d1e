"""When the peer worker runs: with PEER_START=on_demand the supervisor starts it once this
machine is in a cluster (peers.json names one), a probe or image ticket waits in the ticket box,
or the executor asks (executor/peer_start.py). Once started it is never stopped; a crash
restarts it like any worker.
"""

from __future__ import annotations

import os

from faden_agent.config import Config
from faden_agent.node.cluster import PeerFile
from faden_agent.transfers.tickets import TICKET_DIR


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
