"""Error events as they are kept: the last XID_KEEP per GPU UUID with their times and
source, written by NVML's event thread (gpu/events.py) and the kernel log's reader
(gpu/kernel_xids.py; one Xid seen by both is kept once), read by the health read (gpu/health.py).
"""

from __future__ import annotations

import collections
import ctypes
import threading
from typing import Any

from faden_agent.workers.inventory.gpu import rules as gpu_rules

XID_KEEP = 16  # last Xid events kept per GPU
MAX_CODES = 64  # distinct Xid codes counted per GPU (the catalogue has about 170)
SAME_XID_S = 10.0  # NVML's event and the kernel's line of one Xid are this close in time

# The error events of NVML's event set, by the pynvml name of their type bit.
ERROR_EVENTS = {
    "nvmlEventTypeXidCriticalError": "xid",
    "nvmlEventTypeDoubleBitEccError": "double_bit_ecc",
    "nvmlEventTypeDramRetirementEvent": "dram_retirement",
    "nvmlEventTypeDramRetirementFailure": "dram_retirement_failure",
    "nvmlEventTypeNonFatalPoisonError": "non_fatal_poison",
    "nvmlEventTypeFatalPoisonError": "fatal_poison",
    "nvmlEventTypeGpuUnavailableError": "gpu_unavailable",
    "nvmlEventTypeGpuRecoveryAction": "recovery_action",
}


def counts(event: str, code: int) -> bool:
    """The event can change a verdict (an Xid of the table's, or another error event)."""
    return event != "xid" or code in gpu_rules.XID_FAILED or code in gpu_rules.XID_DEGRADED


def handle_key(handle: Any) -> int:
    """The same number for the same device handle, whichever thread got it."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value or 0
    except (TypeError, ctypes.ArgumentError):
        return id(handle)  # the unit tests' Python imitation hands out objects


class XidLog:
    """The last XID_KEEP error events per GPU UUID (when full, the oldest that cannot change
    a verdict goes first), written by the event threads."""

    def __init__(self, keep: int = XID_KEEP, hold_s: float = 3600.0):
        self.keep = keep
        self.hold_s = hold_s  # a repeat after this long is news again (GPU_XID_HOLD_SEC)
        self._lock = threading.Lock()
        self._events: dict[str, collections.deque[dict[str, Any]]] = {}
        self._totals: dict[str, dict[int, int]] = {}  # Xids seen per code: /metrics' counter

    def add(self, uuid: str, event: str, code: int, at: float, source: str = "nvml") -> bool:
        """Keeps the event; True when it can change the GPU's verdict and is the first of
        its kind and code within the hold (a storm of one Xid wakes the probe once). The
        same Xid from the other source, or the same line read again, is not kept twice."""
        at = round(at, 3)
        with self._lock:
            log = self._events.setdefault(uuid, collections.deque())
            same = [e for e in log if e["event"] == event and e["code"] == code]
            if any(e["at"] == at or (e.get("source") != source and abs(at - e["at"]) <= SAME_XID_S) for e in same):
                return False
            repeated = any(at - e["at"] <= self.hold_s for e in same)
            if len(log) >= self.keep:  # a storm of application Xids must not push out a fatal one
                log.remove(next((e for e in log if not counts(e["event"], e["code"])), log[0]))
            log.append({"event": event, "code": code, "at": at, "source": source})
            totals = self._totals.setdefault(uuid, {})
            if event == "xid" and (code in totals or len(totals) < MAX_CODES):
                totals[code] = totals.get(code, 0) + 1
        return counts(event, code) and not repeated

    def totals(self, uuid: str | None) -> dict[str, int]:
        """Xids seen on the GPU per code, ever (kept across restarts): never decreases."""
        with self._lock:
            return {str(code): n for code, n in sorted(self._totals.get(uuid or "", {}).items())}

    def restore_totals(self, uuid: str, totals: Any) -> None:
        found = totals.items() if isinstance(totals, dict) else ()
        kept = {int(c): n for c, n in found if str(c).isdigit() and isinstance(n, int) and n >= 0}
        with self._lock:
            self._totals[uuid] = dict(list(kept.items())[:MAX_CODES])

    def of(self, uuid: str | None) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._events.get(uuid or "", ()))

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        with self._lock:
            return {uuid: list(log) for uuid, log in self._events.items()}

    def switches(self) -> list[dict[str, Any]]:
        """NVSwitch SXid logs (gpu/kernel_xids.py keys them "nvswitch:<bus>")."""
        with self._lock:
            found = [(uuid, list(log)) for uuid, log in self._events.items() if uuid.startswith("nvswitch:")]
        return [{"pci_bus_id": uuid.partition(":")[2], "sxid": log} for uuid, log in sorted(found)]

    def restore(self, uuid: str, events: list[Any]) -> None:
        """A GPU's log as an earlier run kept it (gpu/evidence.py); malformed entries left out."""
        kept = [
            {"event": e["event"], "code": e["code"], "at": e["at"], "source": str(e.get("source", "nvml"))[:16]}
            for e in events
            if isinstance(e, dict)
            and isinstance(e.get("event"), str)
            and isinstance(e.get("code"), int)
            and isinstance(e.get("at"), int | float)
        ]
        with self._lock:
            self._events[uuid] = collections.deque(kept[-self.keep :])
