"""What a remedy job (a check, a reset) is and works with: the Job (its steps as they happen, its
end, its stop and time limit) and the Tools it may use (the GPU probe and event watch, the last
GPU section, the programs' paths). The worker's door starts and reads jobs (remedies.py); a job
ends once, with a reason from protocol.REASONS when it failed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
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


class Tools:
    __slots__ = (
        "probe",
        "watcher",
        "section",
        "fabric_manager",
        "dcgmi",
        "nvidia_smi",
        "on_change",
        "remember_group",
        "remember_persistence",
        "proc_root",
    )

    def __init__(
        self,
        probe: Any,
        watcher: Any,
        section: Callable[[], dict[str, Any] | None],
        fabric_manager: Callable[[str | None], Any],
        dcgmi: str,
        nvidia_smi: str,
        on_change: Callable[[], None],
        remember_group: Callable[[int], None],
        remember_persistence: Callable[[str | None], None] = lambda bus: None,
        proc_root: str = "/proc",
    ) -> None:
        self.probe = probe  # probe.GpuProbe
        self.watcher = watcher  # events.GpuErrorWatcher
        self.section = section  # the last gpu section the inventory collected
        self.fabric_manager = fabric_manager  # node_notes.NodeNotes.fabric_manager
        self.dcgmi = dcgmi
        self.nvidia_smi = nvidia_smi
        self.on_change = on_change  # a record now (a verdict may have moved)
        self.remember_group = remember_group  # a program's process group, ended at the next start if left
        self.remember_persistence = remember_persistence  # a bus id whose persistence is off
        self.proc_root = proc_root

    def devices(self) -> dict[str, dict[str, Any]]:
        """uuid -> the device as the last section has it (present GPUs that NVML named)."""
        devices = (self.section() or {}).get("devices") or []
        return {d["uuid"]: d for d in devices if isinstance(d, dict) and d.get("uuid")}
