"""When an Xid stops counting towards its GPU's verdict: on the catalogue's remedy (a reset
of that GPU, a reboot), the clock (GPU_XID_HOLD_SEC) only where the catalogue names neither.
Owns the boot id of this run and the last reset seen per GPU; `reset_sign` tells a reset
from what NVML shows before and after one (docs/inventory.md, "Holds").
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faden_agent.workers.inventory.gpu import rules as gpu_rules

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
RESET_ACTIONS = ("gpu_reset", "drain_and_reset", "bus_reset")  # NVML recovery actions a reset ends


def read_boot_id(path: Path = BOOT_ID) -> str | None:
    """The kernel's boot id without dashes (journald's form), None when unreadable."""
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            text = fh.read(64).strip().replace("-", "").lower()
    except OSError:
        return None
    return text if len(text) == 32 and all(c in "0123456789abcdef" for c in text) else None


def reset_sign(before: dict[str, Any], now: dict[str, Any]) -> str | None:
    """What in two reads of one GPU says it was reset between them, or None. A reset starts
    the GPU's volatile counts afresh, completes a pending page retirement or row remap, ends a
    reset the driver asked for, and brings back a GPU that failed every call."""
    if before.get("failing") and not now.get("failing"):
        return f"answers again after: {before['failing']}"
    for name in ("ecc_corrected_volatile", "ecc_uncorrected_volatile"):
        old, new = before.get(name), now.get(name)
        if isinstance(old, int) and isinstance(new, int) and new < old:
            return f"{name} went back from {old} to {new}"
    for name in ("retired_pending", "remap_pending"):
        if before.get(name) and now.get(name) is False:
            return f"{name} completed"
    if before.get("recovery_action") in RESET_ACTIONS and now.get("recovery_action") == "none":
        return f"recovery action {before['recovery_action']} cleared"
    return None


class Holds:
    """Per GPU uuid the last reset seen; `holds(uuid, entry)` whether an Xid entry still counts."""

    def __init__(self, hold_s: float = 3600.0, boot_id: str | None = None, clock: Callable[[], float] = time.time):
        self.hold_s = hold_s
        self.boot_id = boot_id  # None: unknown, so no reboot can be told
        self.clock = clock
        self._lock = threading.Lock()
        self._resets: dict[str, dict[str, Any]] = {}  # uuid -> {"at", "sign", "boot"}

    def reset_seen(self, uuid: str, sign: str, at: float | None = None) -> None:
        """A reset of the GPU at `at` (now by default); an older one than the last kept is not
        (NVML's view of a reset the agent did itself is seen after it, dated before it)."""
        at = round(self.clock() if at is None else at, 3)
        with self._lock:
            kept = self._resets.get(uuid)
            if kept is not None and kept["at"] > at and kept.get("boot") == self.boot_id:
                return
            self._resets[uuid] = {"at": at, "sign": sign, "boot": self.boot_id}

    def last_reset(self, uuid: str | None) -> dict[str, Any] | None:
        with self._lock:
            return dict(self._resets[uuid]) if uuid in self._resets else None

    def restore(self, uuid: str, saved: Any) -> None:
        """An earlier run's last reset (gpu/evidence.py has checked its fields)."""
        if isinstance(saved, dict) and isinstance(saved.get("at"), int | float) and isinstance(saved.get("sign"), str):
            with self._lock:
                self._resets[uuid] = {"at": saved["at"], "sign": saved["sign"][:200], "boot": saved.get("boot")}

    def forget(self, uuid: str) -> None:
        with self._lock:
            self._resets.pop(uuid, None)

    def rebooted_since(self, entry: dict[str, Any]) -> bool:
        boot = entry.get("boot")
        return bool(boot and self.boot_id and boot != self.boot_id)

    def holds(self, uuid: str | None, entry: dict[str, Any], now: float | None = None) -> bool:
        """Whether the Xid (or other error event) `entry` still counts towards the GPU's verdict."""
        at = entry.get("at")
        if not isinstance(at, int | float) or not math.isfinite(at):
            return False
        now = self.clock() if now is None else now
        event = entry.get("event")
        code = entry.get("code")
        xid = gpu_rules.XIDS.get(code) if event == "xid" and isinstance(code, int) else None
        hold = xid.hold if xid else gpu_rules.RESET if event == "sxid_fatal" else gpu_rules.CLOCK
        if event == "xid" and xid is None:
            hold = gpu_rules.HISTORY
        if hold == gpu_rules.HISTORY:
            return False
        if self.rebooted_since(entry):
            return False
        if entry.get("boot") is None and hold != gpu_rules.CLOCK:
            hold = gpu_rules.CLOCK  # kept by an earlier version, without its boot: the clock, as then
        if hold == gpu_rules.REBOOT:
            return True
        reset = self.last_reset(uuid)
        if reset is not None and reset["at"] >= at and reset.get("boot") in (None, entry.get("boot")):
            return False
        return hold == gpu_rules.RESET or now - at <= self.hold_s
