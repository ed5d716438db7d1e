"""Low disk as events the backend sees: `disk.low` when a file system holding the state
directory, Docker's data root or the Ray log directory falls below disklow.low_threshold,
`disk.recovered` once it has RECOVER_MARGIN more than that free again; both name the
biggest consumers the agent knows of. State is per file system (mount point), in memory:
after a restart a file system still low is reported low again."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from faden_agent.config import Config
from faden_agent.disk.disklow import consumers, low_threshold

WATCHED_ROLES = ("state", "docker", "ray_logs")
RECOVER_MARGIN = 1.05  # no event pair for every byte written around the threshold


class DiskWatch:
    def __init__(self, config: Config, measure: Callable[[], list[dict[str, Any]]] | None = None):
        self.config = config
        self.measure = measure or (lambda: consumers(config))
        self.low: set[str] = set()

    def update(self, disks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The events the inventory's disks section calls for now."""
        events = []
        for disk in disks:
            roles = [r for r in disk.get("roles") or () if r in WATCHED_ROLES]
            if not roles or "usage" not in disk:
                continue
            key = str(disk.get("mountpoint") or disk["paths"][0])
            total, free = int(disk["total"]), int(disk["usage"]["free"])
            threshold = low_threshold(total, self.config)
            if key not in self.low and free < threshold:
                self.low.add(key)
                events.append(self._event("disk.low", key, disk, roles, threshold))
            elif key in self.low and free >= threshold * RECOVER_MARGIN:
                self.low.discard(key)
                events.append(self._event("disk.recovered", key, disk, roles, threshold))
        return events

    def _event(self, kind: str, key: str, disk: dict[str, Any], roles: list[str], threshold: int) -> dict[str, Any]:
        return {
            "type": kind,
            "mountpoint": key,
            "paths": disk.get("paths") or [],
            "roles": roles,
            "free_bytes": int(disk["usage"]["free"]),
            "total_bytes": int(disk["total"]),
            "threshold_bytes": threshold,
            "consumers": self.measure(),
            "time": time.time(),
        }


def record_id(event: dict[str, Any]) -> str:
    return f"ev:{event['type']}:{event['mountpoint']}:{int(event['time'] * 1000)}"
