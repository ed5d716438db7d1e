"""GPU events: `gpu.health_changed` (a GPU's verdict differs from the last round's; keyed by UUID,
by index for a GPU whose UUID NVML could not read; first seen `ok` is no news, first seen
degraded or failed is, old: null), `gpu.replaced` (a new uuid at a known bus id) and
`gpu.forgotten` (an operator acknowledged a GPU gone for good)."""

from __future__ import annotations

from typing import Any

HEALTH_CHANGED = "gpu.health_changed"
REPLACED = "gpu.replaced"
FORGOTTEN = "gpu.forgotten"


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

    def forget(self, uuid: str) -> None:
        """A GPU replaced or forgotten: no verdict of it is remembered."""
        self.verdicts.pop(uuid, None)
        self.changes.pop(uuid, None)


def replaced_event(replaced: dict[str, Any], now: float) -> dict[str, Any]:
    """{old_uuid, new_uuid, index, pci_bus_id} -> the event (no failure: the slot holds a GPU)."""
    return {"type": REPLACED, **replaced, "uuid": replaced["old_uuid"], "at": round(now, 3)}


def forgotten_event(uuid: str, by: str, now: float) -> dict[str, Any]:
    return {"type": FORGOTTEN, "uuid": uuid, "by": by, "index": None, "at": round(now, 3)}


def event_id(event: dict[str, Any]) -> str:
    kind = {REPLACED: "replaced:", FORGOTTEN: "forgotten:"}.get(event["type"], "")
    return f"ev:gpu:{kind}{event['uuid'] or event['index']}:{int(event['at'] * 1000)}"
