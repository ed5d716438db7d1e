"""GPU errors as they happen: NVML's event set (critical Xid errors, double-bit ECC
errors) wakes a thread that calls `on_change`, so a GPU falling into error is reported
within seconds instead of at the next interval. No NVML, no GPU, or no GPU that supports
events: the thread ends quietly (the interval still covers those machines).
Notes (why, figures, history): docs/design-notes.md.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from faden_agent.workers.inventory.gpu import load_pynvml
from faden_agent.workers.threads import start_daemon

log = logging.getLogger(__name__)

WAIT_MS = 1000
RETRY_S = 30.0


class GpuErrorWatcher:
    def __init__(self, on_change: Callable[[], None], nvml: Any = None, stop_event: threading.Event | None = None):
        self.on_change = on_change
        self.nvml = nvml
        self.watching = 0  # GPUs registered for events
        self.stop_event = stop_event or threading.Event()  # the worker's one stop event
        self.thread: threading.Thread | None = None

    def start(self, start_thread: Callable[..., threading.Thread] = start_daemon) -> None:
        # Finite: with no NVML, no GPU or no GPU that supports events it ends quietly.
        self.thread = start_thread("inventory-gpu-events", self._run, finite=True)

    def stop(self) -> None:
        self.stop_event.set()

    def _run(self) -> None:
        nvml = self.nvml or load_pynvml()[0]
        if nvml is None:
            return  # no library or no bindings: nothing to watch
        while not self.stop_event.is_set():
            try:
                nvml.nvmlInit()
            except nvml.NVMLError as exc:
                log.debug("no GPU events: %s", exc)
                return  # no library or no driver: nothing to watch
            try:
                if not self._watch(nvml):
                    return
            except nvml.NVMLError as exc:
                log.warning("GPU event wait failed (%s); a record follows, watching again in %.0f s", exc, RETRY_S)
                self.on_change()  # the failure itself (e.g. "GPU is lost") is news
            finally:
                self._shutdown(nvml)
            self.stop_event.wait(RETRY_S)

    def _watch(self, nvml: Any) -> bool:
        """Wait for events until stopped; False when no GPU supports them."""
        event_set = nvml.nvmlEventSetCreate()
        try:
            mask = nvml.nvmlEventTypeXidCriticalError | nvml.nvmlEventTypeDoubleBitEccError
            self.watching = 0
            for index in range(nvml.nvmlDeviceGetCount()):
                try:
                    nvml.nvmlDeviceRegisterEvents(nvml.nvmlDeviceGetHandleByIndex(index), mask, event_set)
                    self.watching += 1
                except nvml.NVMLError as exc:
                    if exc.value != nvml.NVML_ERROR_NOT_SUPPORTED:
                        raise
            if not self.watching:
                return False
            wait = getattr(nvml, "nvmlEventSetWait_v2", None) or nvml.nvmlEventSetWait
            while not self.stop_event.is_set():
                try:
                    wait(event_set, WAIT_MS)
                except nvml.NVMLError as exc:
                    if exc.value == nvml.NVML_ERROR_TIMEOUT:
                        continue
                    raise
                self.on_change()
            return True
        finally:
            nvml.nvmlEventSetFree(event_set)

    @staticmethod
    def _shutdown(nvml: Any) -> None:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
