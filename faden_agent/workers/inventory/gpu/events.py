"""NVML error events as they happen: every error event type each GPU supports (Xid, ECC,
retirement, ...) goes into the XidLog; one that can change a verdict calls `on_change` for a
record now. A GPU whose registration fails in any way (lost, Unknown Error, ...) is left out
of the event set, the others are watched, and it is tried again once it answers. Every NVML
call is timed: one that hangs is named by `problems()`. No NVML, GPU or events: it ends quietly.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from faden_agent.workers.inventory.gpu.health import LOST_CODES
from faden_agent.workers.inventory.gpu.probe import TracedNvml, load_pynvml, nvml_text
from faden_agent.workers.inventory.gpu.rules import DEGRADED
from faden_agent.workers.inventory.gpu.xids import ERROR_EVENTS, XidLog, handle_key

if TYPE_CHECKING:
    from faden_agent.protocol.status import GpuEventsStatus

log = logging.getLogger(__name__)

STOPPED, LOST, RETRY, NOTHING = "stopped", "lost", "retry", "nothing"  # how a watch ended

WAIT_MS = 1000
RETRY_S = 30.0
LOST_PAUSE_S = 1.0  # before the set is built again after a wait ended on a lost GPU
HUNG_AFTER_S = 10.0  # a call (the wait included, past its own WAIT_MS) running longer is hung


class GpuErrorWatcher:
    def __init__(
        self,
        on_change: Callable[[], None],
        stop_event: threading.Event,  # the worker's one stop event
        nvml: Any = None,
        xids: XidLog | None = None,
        hung_after_s: float = HUNG_AFTER_S,
    ) -> None:
        self.on_change = on_change
        self.nvml: Any = TracedNvml(nvml) if nvml is not None else None
        self.xids = xids or XidLog()
        self.hung_after_s = hung_after_s
        self.watched: dict[int, str] = {}  # GPU index -> uuid, registered for events
        self.unwatched: dict[int, str] = {}  # GPU index -> why it is left out (NVML's error)
        self.lost: set[int] = set()  # of those, the GPUs NVML says are lost
        self.error: str | None = None  # why the whole watch stopped, until it runs again
        self._failed_waits = 0  # in a row: the pause before the next set grows with them
        self._uuids: dict[int, str] = {}  # device handle -> UUID, for the events' device
        self.stop_event = stop_event
        self.thread: threading.Thread | None = None
        self._letting_go = threading.Event()  # asked to let NVML go (a reset): set until retake()
        self._let_go = threading.Event()  # NVML is let go: the set freed, nvmlShutdown called

    @property
    def watching(self) -> int:
        return len(self.watched)

    def start(self, start_thread: Callable[..., threading.Thread]) -> None:
        # Finite: with no NVML, no GPU or no GPU that supports events it ends quietly.
        self.thread = start_thread("inventory-gpu-events", self._run, finite=True)

    def stop(self) -> None:
        self.stop_event.set()

    def release(self, wait_s: float = 5.0) -> bool:
        """Frees the event set and shuts NVML down until `retake()` (within one wait); True
        once done, or when the watch does not run."""
        self._letting_go.set()
        thread = self.thread
        if thread is None or not thread.is_alive():
            return True
        return self._let_go.wait(wait_s) or not thread.is_alive()

    def retake(self) -> None:
        self._letting_go.clear()

    def _sleep(self, seconds: float) -> None:
        """Until `seconds` passed, the worker stops or NVML is to be let go."""
        until = time.monotonic() + seconds
        while not self.stop_event.is_set() and not self._letting_go.is_set():
            left = until - time.monotonic()
            if left <= 0:
                return
            self.stop_event.wait(min(left, 0.2))

    def _wait_while_let_go(self) -> None:
        self._let_go.set()
        while self._letting_go.is_set() and not self.stop_event.is_set():
            self.stop_event.wait(0.1)
        self._let_go.clear()

    def status(self) -> GpuEventsStatus:
        """Which GPUs are watched and which are not (why); a call that hangs."""
        return {
            "watching": sorted(self.watched),
            "lost": sorted(self.lost),
            "unwatched": {str(index): why for index, why in sorted(self.unwatched.items())},
            "hung": self.hung(),
            "error": self.error,
            "let_go": self._let_go.is_set(),
        }

    def hung(self) -> str | None:
        """The NVML call of this thread that has run past its bound (the wait: past WAIT_MS too)."""
        nvml = self.nvml
        age = nvml.call_age() if nvml is not None else None
        if age is None:
            return None
        bound = self.hung_after_s + (WAIT_MS / 1000 if (nvml.calling or "").startswith("nvmlEventSetWait") else 0)
        return f"{nvml.calling} ({age:.0f} s)" if age >= bound else None

    def problems(self) -> list[tuple[str, str]]:
        """The node's reasons (verdict, reason) while the watch is blind to some or all GPUs."""
        found = []
        hung = self.hung()
        if hung:
            found.append((DEGRADED, f"GPU events not watched: NVML call hung: {hung}"))
        elif self.error:
            found.append((DEGRADED, f"GPU events not watched: {self.error}"))
        for index, why in sorted(self.unwatched.items()):
            if index not in self.lost:
                found.append((DEGRADED, f"GPU {index}: its events not watched ({why})"))
        return found

    def _run(self) -> None:
        if self.nvml is None:
            nvml = load_pynvml()[0]
            if nvml is None:
                return  # no library or no bindings: nothing to watch
            self.nvml = TracedNvml(nvml)
        nvml = self.nvml
        while not self.stop_event.is_set():
            if self._letting_go.is_set():
                self._wait_while_let_go()
                continue
            try:
                nvml.nvmlInit()
            except nvml.NVMLError as exc:
                log.debug("no GPU events: %s", exc)
                return  # no library or no driver: nothing to watch
            try:
                while not self.stop_event.is_set() and not self._letting_go.is_set():
                    outcome = self._watch(nvml)
                    if outcome == NOTHING:
                        return
                    if outcome != LOST:
                        self.error = None
                    if outcome == LOST:  # registered again at once, without the lost GPU
                        self.on_change()
                        self._sleep(min(RETRY_S, LOST_PAUSE_S * 2 ** min(self._failed_waits, 8)))
            except nvml.NVMLError as exc:
                self.error = f"NVML: {exc}"
                log.warning("GPU event watch failed (%s); a record follows, watching again in %.0f s", exc, RETRY_S)
                self.on_change()  # the failure itself is news
            finally:
                self._shutdown(nvml)
            if not self._letting_go.is_set():
                self._sleep(RETRY_S)

    def _watch(self, nvml: Any) -> str:
        """Wait for events until stopped (STOPPED), a GPU is lost, a wait fails or a GPU left
        out is due to be tried again (LOST, RETRY), or no GPU supports events (NOTHING)."""
        event_set = nvml.nvmlEventSetCreate()
        try:
            left_out_before = dict(self.unwatched)
            self._register(nvml, event_set)
            if self.unwatched != left_out_before:
                self.on_change()  # a GPU left out, or back: a record now
            if not self.watched:
                if not self.unwatched:
                    return NOTHING
                self._sleep(RETRY_S)
                return RETRY
            built = time.monotonic()
            wait = getattr(nvml, "nvmlEventSetWait_v2", None) or nvml.nvmlEventSetWait
            while not self.stop_event.is_set() and not self._letting_go.is_set():
                try:
                    data = wait(event_set, WAIT_MS)
                except nvml.NVMLError as exc:
                    if exc.value in LOST_CODES:
                        return LOST
                    if exc.value != nvml.NVML_ERROR_TIMEOUT:
                        self.error = f"the event wait failed: {exc}"
                        self._failed_waits += 1
                        return LOST  # built again without what fails now, after a pause that grows
                    self._failed_waits, self.error = 0, None
                    if self.unwatched and (time.monotonic() - built >= RETRY_S or self._answers(nvml)):
                        return RETRY
                    continue
                self._failed_waits, self.error = 0, None
                if self._record(nvml, data):
                    self.on_change()
            return STOPPED
        finally:
            nvml.nvmlEventSetFree(event_set)

    def _answers(self, nvml: Any) -> bool:
        """A GPU left out answers again (one cheap call each, once per WAIT_MS): register it now."""
        for index in self.unwatched:
            try:
                nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(index))
                return True
            except nvml.NVMLError:
                continue
        return False

    def _register(self, nvml: Any, event_set: Any) -> None:
        """Every GPU that supports events in the set; one NVML fails on is left out (`unwatched`)."""
        watched: dict[int, str] = {}
        self.unwatched, self.lost = {}, set()
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = nvml_text(nvml.nvmlDeviceGetUUID(handle))
                mask = self._mask(nvml, handle)
                if not mask:
                    continue
                nvml.nvmlDeviceRegisterEvents(handle, mask, event_set)
                self._uuids[handle_key(handle)] = uuid
                watched[index] = uuid
            except nvml.NVMLError as exc:
                if exc.value == nvml.NVML_ERROR_NOT_SUPPORTED:
                    continue
                self.unwatched[index] = str(exc)
                if exc.value in LOST_CODES:
                    self.lost.add(index)
        self.watched = watched

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
