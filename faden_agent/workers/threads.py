"""A worker's threads, supervised like the worker's own process is (docs/service.md).

A critical thread that raises, or returns unless `finite`, fails the whole worker (it stops
saying it is alive and exits); a non-critical one only logs. One stop event and one join
deadline for all of them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from faden_agent.common import testhooks
from faden_agent.common.errorline import error_line

log = logging.getLogger(__name__)


def start_daemon(
    name: str, target: Callable[..., Any], *args: Any, critical: bool = True, finite: bool = False
) -> threading.Thread:
    """The plain starter for parts used outside a worker (tests, tools): no supervision."""
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    thread.start()
    return thread


class RestartRequested(RuntimeError):
    """Raised by a critical thread to have its worker restarted on purpose (a new credential
    on disk, an enrollment to redo): logged as one line, shown as the worker's last exit."""


class WorkerThreads:
    def __init__(self, owner: str, on_failure: Callable[[], None]):
        self.owner = owner
        self.stop_event = threading.Event()
        self.failure: dict[str, str] | None = None  # {"thread": name, "error": text}, first one wins
        self._on_failure = on_failure
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._join_deadline: float | None = None

    def start(
        self, name: str, target: Callable[..., Any], *args: Any, critical: bool = True, finite: bool = False
    ) -> threading.Thread:
        thread = threading.Thread(
            target=self._guard, args=(name, target, args, critical, finite), name=name, daemon=True
        )
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]  # followers come and go
            self._threads.append(thread)
        thread.start()
        return thread

    def _guard(self, name: str, target: Callable[..., Any], args: tuple, critical: bool, finite: bool) -> None:
        try:
            self._test_hook(name)
            target(*args)
        except RestartRequested as exc:  # planned: one line, no traceback
            if self.stop_event.is_set():
                return
            log.warning("%s: thread %s asks for a restart of the worker: %s", self.owner, name, exc)
            error = error_line(exc, named=True)
        except BaseException as exc:  # every death of a thread is reported
            if self.stop_event.is_set():
                log.debug("%s: thread %s ended while stopping: %s", self.owner, name, error_line(exc, named=True))
                return
            log.error("%s: thread %s died", self.owner, name, exc_info=True)
            error = error_line(exc, named=True)  # quoted in `ps` and the heartbeat: one bounded line
        else:
            if finite or self.stop_event.is_set() or not critical:
                return
            error = "it returned, but it should run until the worker stops"
            log.error("%s: thread %s ended unexpectedly", self.owner, name)
        if critical:
            self.fail(name, error)

    def _test_hook(self, name: str) -> None:
        delay = testhooks.thread_dies_after(self.owner, name)
        if delay is not None:
            self.stop_event.wait(delay)
            raise RuntimeError("made to die by the test hook THREAD_DIES")

    def fail(self, thread: str, error: str) -> None:
        with self._lock:
            if self.failure is not None:
                return
            self.failure = {"thread": thread, "error": error}
        self._on_failure()

    def alive(self) -> list[str]:
        with self._lock:
            return [t.name for t in self._threads if t.is_alive()]

    def stop(self) -> None:
        self.stop_event.set()

    def join(self, budget_s: float) -> list[str]:
        """Join every thread within ONE budget shared by all calls; the names still alive."""
        if self._join_deadline is None:
            self._join_deadline = time.monotonic() + budget_s
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, self._join_deadline - time.monotonic()))
        return [t.name for t in threads if t.is_alive()]
