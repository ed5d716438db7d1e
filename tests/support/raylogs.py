"""Ray log trees for the Ray source's tests: a serve log directory where Ray writes one, and a
Collector that plays the shipper (drains the backlog, accepts every position at once)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from faden_agent.workers.logs.backlog import Backlog
from faden_agent.workers.logs.positions import Positions


class Collector:
    """Plays the shipper: drains the backlog and accepts every position at once."""

    def __init__(self, backlog: Backlog, positions: Positions):
        self.lines: list = []
        self.backlog, self.positions = backlog, positions
        threading.Thread(target=self.run, daemon=True).start()

    def run(self) -> None:
        while True:
            for entry in self.backlog.take(100, 10**6, 0.05, 0.2):
                self.lines.append(entry)
                self.positions.advance({entry.source: entry.position})

    def wait(self, n: int, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.lines) < n and time.monotonic() < deadline:
            time.sleep(0.05)


def serve_dir(ray_dir: Path, container: str = "ray-head-1") -> Path:
    path = ray_dir / container / "session_2024-01-01_00-00-00_1" / "logs" / "serve"
    path.mkdir(parents=True)
    return path
