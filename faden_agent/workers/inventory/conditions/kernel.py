"""The node conditions the kernel's lines raise: a KernelLines consumer (kernel/lines.py) that
keeps, per condition, its last line (when, which boot, the reason), and the KernelView a round
reads of them. A cgroup's own OOM kill is its container's (the `oom` event), counted, never a
node condition. Lines come from the reading thread, views go to the collector's: one lock."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from faden_agent.protocol import conditions as names
from faden_agent.workers.inventory.conditions import kernel_lines as kinds
from faden_agent.workers.inventory.kernel.lines import KernelLine

MAX_REASON = 200


class KernelView(NamedTuple):
    """What the kernel's lines said, for one round: condition -> {"at", "boot", "reason"} of its
    last line; this boot's id; why no kernel line can be read now (None: they can)."""

    seen: dict[str, dict[str, Any]]
    boot_id: str | None
    problem: str | None


def condition_of(signal: kinds.KernelSignal) -> tuple[str, str] | None:
    """(condition, reason) of a classified line; None for one that is no node condition."""
    d = signal.detail
    if signal.kind == kinds.HUNG_TASK:
        return names.KERNEL_HUNG_TASK, f"task {d.get('task')}:{d.get('pid')} blocked for more than {d.get('seconds')} s"
    if signal.kind == kinds.SOFT_LOCKUP:
        task = f" ({d['task']}:{d.get('pid')})" if "task" in d else ""
        return names.KERNEL_LOCKUP, f"soft lockup on CPU {d.get('cpu')}{task}"
    if signal.kind == kinds.HARD_LOCKUP:
        return names.KERNEL_LOCKUP, f"hard lockup on CPU {d.get('cpu')}"
    if signal.kind == kinds.MACHINE_CHECK:
        corrected = d.get("severity") == "corrected"
        name = names.HARDWARE_ERROR_CORRECTED if corrected else names.HARDWARE_ERROR_UNCORRECTED
        return name, f"machine check, {d.get('severity')}: {d.get('what')}"
    if signal.kind in (kinds.MEMORY_CORRECTED, kinds.MEMORY_UNCORRECTED):
        corrected = signal.kind == kinds.MEMORY_CORRECTED
        name = names.HARDWARE_ERROR_CORRECTED if corrected else names.HARDWARE_ERROR_UNCORRECTED
        what = "corrected" if corrected else "uncorrected"
        return name, f"EDAC {d.get('controller')}: {d.get('count')} {what} error(s): {d.get('what', '')}".rstrip(": ")
    if signal.kind == kinds.OOM_KILL and d.get("scope") == "system":
        return names.OOM_KILL, f"out of memory: the kernel killed {d.get('task')} (pid {d.get('pid')})"
    return None


def holding(hold_s: float | None, entry: dict[str, Any], boot_id: str | None, now: float) -> bool:
    """Whether a condition's last line still holds it: this boot's, and within its hold (None:
    until the next boot)."""
    return entry.get("boot") == boot_id and (hold_s is None or now - entry["at"] < hold_s)


class KernelConditions:
    name = "node-conditions"

    def __init__(
        self,
        boot_id: str | None,
        holds: dict[str, float | None],
        on_change: Callable[[], None],
        kept: Any = None,
        clock: Callable[[], float] = time.time,
    ):
        """`holds`: condition -> seconds or None (the settings); `kept`: the view's `seen` an
        earlier run left (node-conditions.json): its entries of this boot that are well formed."""
        self.boot_id = boot_id
        self.holds = holds
        self.on_change = on_change
        self.clock = clock
        self.read = 0  # lines that named a node condition
        self.cgroup_oom_kills = 0  # the OOM killer acting inside one cgroup: the container's event
        self._lock = threading.Lock()
        self._seen = restored(kept, boot_id)

    def take(self, line: KernelLine) -> None:
        signal = kinds.classify(line.text)
        found = condition_of(signal) if signal is not None else None
        if found is None:
            if signal is not None and signal.kind == kinds.OOM_KILL:
                self.cgroup_oom_kills += 1
            return
        name, reason = found
        now = self.clock()
        entry = {"at": min(line.at, now), "boot": line.boot_id, "reason": reason[:MAX_REASON]}
        with self._lock:
            self.read += 1
            last = self._seen.get(name)
            if last is not None and last["boot"] == entry["boot"] and last["at"] > entry["at"]:
                return  # an older line than the one kept (read again after a position was lost)
            self._seen[name] = entry
        if holding(self.holds.get(name), entry, self.boot_id, now):
            self.on_change()  # a round soon, not at the next interval

    def view(self, problem: str | None) -> KernelView:
        with self._lock:
            return KernelView({name: dict(entry) for name, entry in self._seen.items()}, self.boot_id, problem)


def restored(kept: Any, boot_id: str | None) -> dict[str, dict[str, Any]]:
    """The kept entries that are this boot's and well formed (the file is the agent's, but a
    reboot or a hand may have changed it)."""
    out: dict[str, dict[str, Any]] = {}
    for name, entry in (kept if isinstance(kept, dict) else {}).items():
        if name not in names.KERNEL_CONDITIONS or not isinstance(entry, dict) or entry.get("boot") != boot_id:
            continue
        at, reason = entry.get("at"), entry.get("reason")
        if isinstance(at, int | float) and not isinstance(at, bool) and math.isfinite(at) and isinstance(reason, str):
            out[name] = {"at": float(at), "boot": boot_id, "reason": reason[:MAX_REASON]}
    return out
