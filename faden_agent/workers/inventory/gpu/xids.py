"""Error events as they are kept: the last XID_KEEP per GPU UUID with their time, source and
boot id (and the pid and container a kernel line names), written by NVML's event thread
(gpu/events.py) and the kernel log's reader (gpu/kernel_xids.py; one Xid seen by both is kept
once), read by the health read (gpu/health.py). Whether one still counts: gpu/holds.py.
"""

from __future__ import annotations

import collections
import ctypes
import threading
from typing import Any

from faden_agent.workers.inventory.gpu import rules as gpu_rules
from faden_agent.workers.inventory.gpu.holds import Holds

XID_KEEP = 16  # last Xid events kept per GPU
MAX_LOGS = 256  # GPUs, NVSwitches and unplaced bus ids with a log: a new one past this is dropped
MAX_CODES = 64  # distinct Xid codes counted per GPU (the catalogue has about 170)
SWITCH = "nvswitch:"  # the log key of an NVSwitch's SXids: SWITCH + its bus id
UNPLACED = "pci:"  # the log key of Xid lines of a bus id no GPU was seen at: UNPLACED + the bus id
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
    """The event can change a verdict (an Xid of the table's, a fatal SXid, another error event)."""
    if event == "sxid":
        return False
    return event != "xid" or code in gpu_rules.XID_FAILED or code in gpu_rules.XID_DEGRADED


def _same_line(kept: dict[str, Any], new: dict[str, Any]) -> bool:
    """`new` is `kept` read again: the same time, or the same kmsg record of the same boot
    (a kmsg line's time is the boot's wall time, computed again by each run, plus its offset)."""
    if kept["at"] == new["at"]:
        return True
    return "seq" in new and kept.get("seq") == new["seq"] and kept.get("boot") == new["boot"]


def handle_key(handle: Any) -> int:
    """The same number for the same device handle, whichever thread got it."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value or 0
    except (TypeError, ctypes.ArgumentError):
        return id(handle)  # the unit tests' Python imitation hands out objects


class XidLog:
    """The last XID_KEEP error events per GPU UUID (when full, the oldest that cannot change
    a verdict goes first), written by the event threads."""

    def __init__(self, keep: int = XID_KEEP, hold_s: float = 3600.0, holds: Holds | None = None):
        self.keep = keep
        self.holds = holds or Holds(hold_s)  # a repeat after its hold ended is news again
        self._lock = threading.Lock()
        self._events: dict[str, collections.deque[dict[str, Any]]] = {}
        self._totals: dict[str, dict[int, int]] = {}  # Xids seen per code: /metrics' counter

    def add(
        self, uuid: str, event: str, code: int, at: float, source: str = "nvml", boot: str | None = None, **named: Any
    ) -> bool:
        """Keeps the event (with `boot`, this boot's id by default, and what the line `named`:
        pid, process, container_id, a kmsg line's seq); True when it can change the GPU's verdict
        and no event of its kind and code still holds (a storm of one Xid wakes the probe once).
        The same Xid from the other source, or the same line read again (its time, or its kmsg
        seq in its boot), is not kept twice."""
        at = round(at, 3)
        entry = {"event": event, "code": code, "at": at, "source": source, "boot": boot or self.holds.boot_id}
        entry.update({key: value for key, value in named.items() if value is not None})
        with self._lock:
            if uuid not in self._events and len(self._events) >= MAX_LOGS:
                return False
            log = self._events.setdefault(uuid, collections.deque())
            same = [e for e in log if e["event"] == event and e["code"] == code]
            if any(
                _same_line(e, entry) or (e.get("source") != source and abs(at - e["at"]) <= SAME_XID_S) for e in same
            ):
                return False
            repeated = any(self.holds.holds(uuid, e, at) for e in same)
            if len(log) >= self.keep:  # a storm of application Xids must not push out a fatal one
                log.remove(next((e for e in log if not counts(e["event"], e["code"])), log[0]))
            log.append(entry)
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
        """NVSwitch SXid logs (gpu/kernel_xids.py keys them SWITCH + bus)."""
        return [{"pci_bus_id": bus, "sxid": log} for bus, log in self.by_bus(SWITCH)]

    def unplaced(self) -> list[dict[str, Any]]:
        """Xid lines of a bus id no GPU was seen at (gpu/kernel_xids.py keys them UNPLACED + bus)."""
        return [{"pci_bus_id": bus, "xid": log} for bus, log in self.by_bus(UNPLACED)]

    def by_bus(self, prefix: str) -> list[tuple[str, list[dict[str, Any]]]]:
        with self._lock:
            found = [(key, list(log)) for key, log in self._events.items() if key.startswith(prefix)]
        return [(key.removeprefix(prefix), log) for key, log in sorted(found)]

    def restore(self, uuid: str, events: list[dict[str, Any]]) -> None:
        """A GPU's log as an earlier run kept it (node/gpu_faults.py has checked every field)."""
        with self._lock:
            self._events[uuid] = collections.deque(dict(e) for e in events[-self.keep :])

    def forget(self, uuid: str) -> None:
        with self._lock:
            self._events.pop(uuid, None)
            self._totals.pop(uuid, None)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._events)
