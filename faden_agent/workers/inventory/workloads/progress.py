"""Forward progress of one serving container from its scraped samples: requests running or
waiting while no progress counter moved for `stall_s` -> "stalled"; a counter moving again,
or no request left -> "recovered". Idle (nothing running or waiting) is never a stall; a
counter that went backwards (the engine restarted) counts as moving."""

from __future__ import annotations

from typing import Any

from faden_agent.workers.inventory.workloads.promtext import BUSY, PROGRESS

STALLED = "workload.stalled"
RECOVERED = "workload.recovered"


def reading(samples: dict[str, float]) -> dict[str, Any]:
    """The engine the samples come from, requests in flight, and its progress counters."""
    engine = next((e for e, names in BUSY.items() if any(n in samples for n in (*names, *PROGRESS[e]))), "unknown")
    busy = {name: samples[name] for name in BUSY.get(engine, ()) if name in samples}
    counters = {name: samples[name] for name in PROGRESS.get(engine, ()) if name in samples}
    return {"engine": engine, "in_flight": sum(busy.values()), "busy": busy, "counters": counters}


class Progress:
    __slots__ = ("stall_s", "counters", "moved_at", "stalled_since", "idle", "last")

    def __init__(
        self,
        stall_s: float,
        counters: dict[str, float] | None = None,
        moved_at: float = 0.0,
        stalled_since: float | None = None,
        idle: bool = True,
        last: dict[str, Any] | None = None,
    ) -> None:
        self.stall_s = stall_s
        self.counters = counters
        self.moved_at = moved_at  # when a counter last moved, or the container was last idle
        self.stalled_since = stalled_since
        self.idle = idle
        self.last: dict[str, Any] = {} if last is None else last

    def update(self, samples: dict[str, float], now: float) -> tuple[str, dict[str, Any]] | None:
        """(event type, its details) when the container's state changes, else None."""
        current = self.last = reading(samples)
        counters = current["counters"]
        moved = self.counters is None or counters != self.counters
        was_idle, self.idle = self.idle, current["in_flight"] <= 0 or not counters
        self.counters = counters
        if moved or self.idle or was_idle:  # the clock of a stall starts when work is first seen
            self.moved_at = now
            if self.stalled_since is not None and (moved or self.idle):
                stalled_for = now - self.stalled_since
                self.stalled_since = None
                why = "progress" if moved else "idle"
                return RECOVERED, {
                    **self._details(current),
                    "recovered_by": why,
                    "stalled_for_s": round(stalled_for, 1),
                }
            return None
        if self.stalled_since is None and now - self.moved_at >= self.stall_s:
            self.stalled_since = self.moved_at
            return STALLED, {**self._details(current), "stalled_for_s": round(now - self.moved_at, 1)}
        return None

    def _details(self, current: dict[str, Any]) -> dict[str, Any]:
        return {
            "engine": current["engine"],
            "requests": current["busy"],
            "counters": current["counters"],
            "stall_sec": self.stall_s,
        }
