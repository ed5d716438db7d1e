"""NVML error events as they happen: every error event type each GPU supports (Xid, ECC,
retirement, ...) goes into the XidLog; one that can change a verdict calls `on_change` for a
record now. A lost GPU is left out of the event set (the others' events go on) and put
back once it answers again. No NVML, GPU or event support: the thread ends quietly.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from faden_agent.workers.inventory.gpu.health import LOST_CODES
from faden_agent.workers.inventory.gpu.probe import load_pynvml, nvml_text
from faden_agent.workers.inventory.gpu.xids import ERROR_EVENTS, XidLog, handle_key

log = logging.getLogger(__name__)

STOPPED, LOST, RETRY, NOTHING = "stopped", "lost", "retry", "nothing"  # how a watch ended

WAIT_MS = 1000
RETRY_S = 30.0
LOST_PAUSE_S = 1.0  # before the set is built again after a wait ended on a lost GPU


class GpuErrorWatcher:
    def __init__(
        self,
        on_change: Callable[[], None],
        stop_event: threading.Event,  # the worker's one stop event
        nvml: Any = None,
        xids: XidLog | None = None,
    ) -> None:
        self.on_change = on_change
        self.nvml = nvml
        self.xids = xids or XidLog()
        self.watching = 0  # GPUs registered for events
        self.lost: set[int] = set()  # GPU indexes left out of the set: lost at registration
        self._uuids: dict[int, str] = {}  # device handle -> UUID, for the events' device
        self.stop_event = stop_event
        self.thread: threading.Thread | None = None

    def start(self, start_thread: Callable[..., threading.Thread]) -> None:
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
                while not self.stop_event.is_set():
                    outcome = self._watch(nvml)
                    if outcome == NOTHING:
                        return
                    if outcome == LOST:  # registered again at once, without the lost GPU
                        self.on_change()
                        self.stop_event.wait(LOST_PAUSE_S)
            except nvml.NVMLError as exc:
                log.warning("GPU event wait failed (%s); a record follows, watching again in %.0f s", exc, RETRY_S)
                self.on_change()  # the failure itself (e.g. "GPU is lost") is news
            finally:
                self._shutdown(nvml)
            self.stop_event.wait(RETRY_S)

    def _watch(self, nvml: Any) -> str:
        """Wait for events until stopped (STOPPED), a GPU is lost or a lost one is due to be
        tried again (LOST, RETRY), or no GPU supports events (NOTHING)."""
        event_set = nvml.nvmlEventSetCreate()
        try:
            lost_before = set(self.lost)
            self._register(nvml, event_set)
            if self.lost - lost_before or (lost_before and not self.lost):
                self.on_change()  # a GPU lost, or back: a record now
            if not self.watching:
                if not self.lost:
                    return NOTHING
                self.stop_event.wait(RETRY_S)
                return RETRY
            built = time.monotonic()
            wait = getattr(nvml, "nvmlEventSetWait_v2", None) or nvml.nvmlEventSetWait
            while not self.stop_event.is_set():
                try:
                    data = wait(event_set, WAIT_MS)
                except nvml.NVMLError as exc:
                    if exc.value in LOST_CODES:
                        return LOST
                    if exc.value != nvml.NVML_ERROR_TIMEOUT:
                        raise
                    if self.lost and (time.monotonic() - built >= RETRY_S or self._answers(nvml)):
                        return RETRY
                    continue
                if self._record(nvml, data):
                    self.on_change()
            return STOPPED
        finally:
            nvml.nvmlEventSetFree(event_set)

    def _answers(self, nvml: Any) -> bool:
        """A lost GPU answers again (one cheap call each, once per WAIT_MS): register it now."""
        for index in self.lost:
            try:
                nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(index))
                return True
            except nvml.NVMLError:
                continue
        return False

    def _register(self, nvml: Any, event_set: Any) -> None:
        """Every GPU that supports events in the set, but those NVML says are lost."""
        self.watching = 0
        self.lost = set()
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = nvml_text(nvml.nvmlDeviceGetUUID(handle))
                mask = self._mask(nvml, handle)
                if not mask:
                    continue
                nvml.nvmlDeviceRegisterEvents(handle, mask, event_set)
                self._uuids[handle_key(handle)] = uuid
                self.watching += 1
            except nvml.NVMLError as exc:
                if exc.value in LOST_CODES:
                    self.lost.add(index)
                elif exc.value != nvml.NVML_ERROR_NOT_SUPPORTED:
                    raise

    @staticmethod
    def _mask(nvml: Any, handle: Any) -> int:
        """Every error event type this GPU supports (the critical Xid and double-bit ECC
        ones where NVML cannot say which it supports)."""
        wanted = 0
        for name in ERROR_EVENTS:
            wanted |= getattr(nvml, name, 0)
        try:
            return nvml.nvmlDeviceGetSupportedEventTypes(handle) & wanted
        except (AttributeError, nvml.NVMLError):
            return nvml.nvmlEventTypeXidCriticalError | nvml.nvmlEventTypeDoubleBitEccError

    def _record(self, nvml: Any, data: Any) -> bool:
        """Logs the event; True when it calls for a record now (other Xids, and repeats,
        wait for the next interval: an application's Xid storm is not a record a second)."""
        uuid = self._uuids.get(handle_key(getattr(data, "device", None)))
        kind = next((ERROR_EVENTS[n] for n in ERROR_EVENTS if getattr(nvml, n, 0) == data.eventType), None)
        if uuid and kind:
            return self.xids.add(uuid, kind, int(data.eventData), time.time())
        return True  # an event this agent cannot place: look at every GPU now

    @staticmethod
    def _shutdown(nvml: Any) -> None:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
