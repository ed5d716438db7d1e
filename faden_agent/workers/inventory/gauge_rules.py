"""When a gauge (one value of a `usage` object) goes on the wire: when it moved past its
threshold since the value last sent, or that value is older than the gauge age
(INVENTORY_USAGE_SEC). THRESHOLDS by gauge name is the table of docs/inventory.md
("Gauges"); a name not in it is sent on any change.
"""

from __future__ import annotations

import math
from typing import Any

GiB = 1024**3
THRESHOLDS: dict[str, float] = {
    "utilization_gpu": 10,  # percentage points
    "utilization_memory": 10,
    "sm_active": 10,  # GPM's activity figures (gpu/gpm.py), percentage points
    "sm_occupancy": 10,
    "tensor_active": 10,
    "dram_active": 10,
    "temperature_c": 5,
    "power_draw_w": 50,
    "memory_used": GiB,
    "memory_free": GiB,
    "used_memory": GiB,  # a GPU process's memory
    "memory_available": GiB,
    "swap_used": GiB,
    "used": GiB,  # a file system's
    "free": GiB,
    "percent": 2,
    "cpu_percent": 25,
    "load_avg": 1.0,  # any of the three
    "duration_ms": 1000,  # a probe's
    "clock_events_active_s": 60,  # any event's age; an event starting or ending is sent at once
}


def distance(old: Any, new: Any) -> float:
    """How far apart two gauge values are: numbers by difference, lists and objects by their
    farthest member; values of another kind or shape are infinitely far, equal ones 0."""
    if old == new:
        return 0.0
    if _number(old) and _number(new):
        return abs(new - old)
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return max(distance(a, b) for a, b in zip(old, new, strict=True))
    if isinstance(old, dict) and isinstance(new, dict) and old.keys() == new.keys():
        return max(distance(old[k], new[k]) for k in old)
    return math.inf


def moved(name: str, old: Any, new: Any) -> bool:
    threshold = THRESHOLDS.get(name)
    if threshold is None:
        return old != new
    return distance(old, new) >= threshold


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
