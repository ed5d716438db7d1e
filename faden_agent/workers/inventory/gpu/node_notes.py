"""The GPU section's node-level reasons besides its GPUs': what the watch cannot see (no kernel
log, NVML's event wait hung, a GPU left out of it) and, where the GPUs are on an NVSwitch
fabric, the fabric manager (node/fabric_manager.py, checked at most every `fabric_every_s`,
its state added to the section as `fabric_manager`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from faden_agent.node.fabric_manager import FabricManager, check
from faden_agent.workers.inventory.gpu.rules import DEGRADED, FAILED


class NodeNotes:
    def __init__(
        self,
        systemctl: str,
        fabric_every_s: float,
        kernel_problem: Callable[[], str | None] = lambda: None,
        watch_problems: Callable[[], list[tuple[str, str]]] = list,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.systemctl = systemctl
        self.fabric_every_s = fabric_every_s
        self.kernel_problem = kernel_problem
        self.watch_problems = watch_problems
        self.clock = clock
        self._fabric: FabricManager | None = None
        self._fabric_at = float("-inf")

    def __call__(self, section: dict[str, Any]) -> list[tuple[str, str]]:
        """The node's (verdict, reason) pairs for this GPU section; adds `fabric_manager` to it."""
        if not section.get("devices") and not section.get("missing"):
            return []
        notes = list(self.watch_problems())
        kernel = self.kernel_problem()
        if kernel:
            notes.append((DEGRADED, f"{kernel}: GPU faults of the kernel log not seen"))
        if on_fabric(section):
            manager = self.fabric_manager(section.get("driver_version"))
            section["fabric_manager"] = manager._asdict()
            if manager.problem:
                notes.append((FAILED if manager.active is not None else DEGRADED, manager.problem))
        return notes

    def fabric_manager(self, driver_version: str | None) -> FabricManager:
        now = self.clock()
        if self._fabric is None or now - self._fabric_at >= self.fabric_every_s:
            self._fabric, self._fabric_at = check(self.systemctl, driver_version), now
        return self._fabric


def on_fabric(section: dict[str, Any]) -> bool:
    """The GPUs are on an NVSwitch fabric: NVML reports fabric state for one, or NVSwitch lines were read."""
    if section.get("nvswitches"):
        return True
    return any((device.get("health") or {}).get("fabric") for device in section.get("devices") or ())
