"""A cluster-wide job the reference backend runs on a thread: fan-outs and probe rounds.

Holds what every such job shares (its id, cluster, state, times, lock, thread) so that each
kind only says what it does (_run) and what it adds to its status (_detail).
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any


class ClusterRound:
    kind = "round"  # names the thread

    def __init__(self, backend: Any, cluster: str):
        self.id = uuid.uuid4().hex[:12]
        self.backend = backend
        self.cluster = cluster
        self.state = "running"
        self.started_at = time.time()
        self.ended_at: float | None = None
        self._lock = threading.Lock()

    def start(self) -> ClusterRound:
        threading.Thread(target=self._run, name=f"{self.kind}-{self.id}", daemon=True).start()
        return self

    def finish(self, state: str) -> None:
        """Called with the lock held."""
        self.state = state
        self.ended_at = time.time()

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                "id": self.id,
                "cluster": self.cluster,
                "state": self.state,
                "started_at": self.started_at,
                "ended_at": self.ended_at,
                **self._detail(),
            }

    def _detail(self) -> dict[str, Any]:
        raise NotImplementedError

    def _run(self) -> None:
        raise NotImplementedError
