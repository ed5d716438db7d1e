"""Reports: what producers (executor, inventory, logs) use to report: a durable write to the
outbox, then a wake-up on Endpoints.reports_ready so the stream worker's Uplink sends
it now instead of at its next poll."""

from __future__ import annotations

import threading
from typing import Any

import zmq

from faden_agent.backend.outbox import Outbox
from faden_agent.config import Config
from faden_agent.ipc import Channel, Endpoints


class Reports:
    def __init__(self, config: Config):
        self.outbox = Outbox(config.state_dir)
        self._lock = threading.Lock()  # zmq sockets are not thread-safe; producers use threads
        self._poke = Channel.connect(zmq.PUSH, Endpoints(config.runtime_dir).reports_ready, hwm=1)

    def put(self, kind: str, data: dict[str, Any], record_id: str | None = None) -> dict[str, Any]:
        record = self.outbox.put(kind, data, record_id)
        self.poke()
        return record

    def put_latest(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        record = self.outbox.put_latest(kind, data)
        self.poke()
        return record

    def poke(self) -> None:
        with self._lock:
            self._poke.send("poke", block=False)  # dropped when one is already queued: fine

    def close(self) -> None:
        with self._lock:
            self._poke.close()
        self.outbox.close()
