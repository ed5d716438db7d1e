"""A fixed-bucket histogram a worker keeps and sends in its liveness status (plain numbers)."""

from __future__ import annotations

import bisect
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from faden_agent.protocol.status import HistogramSnapshot


SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Histogram:
    def __init__(self, buckets: tuple[float, ...] = SECONDS_BUCKETS):
        self.bounds = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one: above every bound (+Inf)
        self.total = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        with self._lock:
            self.counts[bisect.bisect_left(self.bounds, value)] += 1
            self.total += value

    def snapshot(self) -> HistogramSnapshot:
        """{"le": bounds, "counts": per bucket (not cumulative, +Inf last), "sum"}."""
        with self._lock:
            return {"le": list(self.bounds), "counts": list(self.counts), "sum": round(self.total, 6)}
