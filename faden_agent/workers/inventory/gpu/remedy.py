"""What a remedy job (a check, a reset) is and works with: the Job (its steps as they happen, its
end, its stop and time limit) and the Tools it may use (the GPU probe and event watch, the last
GPU section, the programs' paths). The worker's door starts and reads jobs (remedies.py); a job
ends once, with a reason from protocol.REASONS when it failed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_STEPS = 2000  # a job's steps kept for the executor to read (each test of 64 GPUs fits)


class Job:
    def __init__(self, job_id: str, kind: str, time_limit_s: float, clock: Callable[[], float] = time.monotonic):
        self.id = job_id
        self.kind = kind
        self.clock = clock
        self.deadline = clock() + max(0.0, time_limit_s)
        self.stop = threading.Event()  # cancelled: its programs are ended
        self.steps: list[dict[str, Any]] = []
        self.end: dict[str, Any] | None = None  # {"ok", "reason", "message", "result"}
        self._lock = threading.Lock()

    def step(self, phase: str, **fields: Any) -> None:
        with self._lock:
            if len(self.steps) < MAX_STEPS:
                self.steps.append({"phase": phase, **fields})

    def steps_since(self, since: int) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.steps[max(0, since) :])

    def left_s(self) -> float:
        return self.deadline - self.clock()

    def finish(self, ok: bool, reason: str, message: str, result: dict[str, Any] | None = None) -> None:
        with self._lock:
            if self.end is None:
                self.end = {"ok": ok, "reason": reason, "message": message[:1500], "result": result or {}}

    @property
    def done(self) -> bool:
        return self.end is not None


@dataclass
class Tools:
    probe: Any  # probe.GpuProbe
    watcher: Any  # events.GpuErrorWatcher
    section: Callable[[], dict[str, Any] | None]  # the last gpu section the inventory collected
    fabric_manager: Callable[[str | None], Any]  # node_notes.NodeNotes.fabric_manager
    dcgmi: str
    nvidia_smi: str
    on_change: Callable[[], None]  # a record now (a verdict may have moved)
    remember_group: Callable[[int], None]  # a program's process group, ended at the next start if left
    remember_persistence: Callable[[str | None], None] = lambda bus: None  # a bus id whose persistence is off
    proc_root: str = "/proc"

    def devices(self) -> dict[str, dict[str, Any]]:
        """uuid -> the device as the last section has it (present GPUs that NVML named)."""
        devices = (self.section() or {}).get("devices") or []
        return {d["uuid"]: d for d in devices if isinstance(d, dict) and d.get("uuid")}
