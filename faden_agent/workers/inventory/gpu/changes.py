"""`gpu.health_changed` events: a GPU's verdict differs from the one in the last round.

Keyed by UUID (by index for a GPU whose UUID NVML could not read). A GPU first seen `ok`
is no news; one first seen degraded or failed is (old: null)."""

from __future__ import annotations

from typing import Any

HEALTH_CHANGED = "gpu.health_changed"


class HealthChanges:
    def __init__(self) -> None:
        self.verdicts: dict[str, str] = {}
        self.changes: dict[str, dict[str, Any]] = {}  # key -> its last change (old, new, reasons, at)

    def events(self, gpu: dict[str, Any] | None, now: float) -> list[dict[str, Any]]:
        """The events the gpu section calls for; remembers its verdicts."""
        found = []
        for device in [*((gpu or {}).get("devices") or ()), *((gpu or {}).get("missing") or ())]:
            health = device.get("health")
            if not health:
                continue
            key = device.get("uuid") or f"index:{device['index']}"
            old, new = self.verdicts.get(key), health["verdict"]
            self.verdicts[key] = new
            if old == new or (old is None and new == "ok"):
                continue
            self.changes[key] = {"old": old, "new": new, "reasons": health["reasons"], "at": round(now, 3)}
            found.append(
                {
                    "type": HEALTH_CHANGED,
                    "index": device["index"],
                    "uuid": device.get("uuid"),
                    "pci_bus_id": device.get("pci_bus_id"),
                    "old": old,
                    "new": new,
                    "reasons": health["reasons"],
                    "at": round(now, 3),
                }
            )
        return found


def event_id(event: dict[str, Any]) -> str:
    return f"ev:gpu:{event['uuid'] or event['index']}:{int(event['at'] * 1000)}"
