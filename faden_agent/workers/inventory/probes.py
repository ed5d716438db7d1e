"""Run probes with a timeout each, in their own threads, so one stuck call (a hung NVML
driver, a dockerd that stopped answering, a dead NFS mount) is reported as "overrun" and
never delays the other probes or the worker's loop. A probe that names its calls in flight
(`call_age`) is also overrun as soon as one call passes `call_bound_s`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from faden_agent.common.errorline import error_line

OK = "ok"
ERROR = "error"
OVERRUN = "overrun"


class ProbeResult:
    __slots__ = ("name", "status", "data", "error", "duration_s", "since")

    def __init__(
        self,
        name: str,
        status: str,
        data: Any = None,
        error: str | None = None,
        duration_s: float = 0.0,
        since: float | None = None,
    ) -> None:
        self.name = name
        self.status = status  # ok | error | overrun
        self.data = data
        self.error = error
        self.duration_s = duration_s
        self.since = since  # overrun: wall time the stuck call started

    def summary(self, timeout_s: float) -> dict[str, Any]:
        """The record's probes.<name> entry; the duration is a gauge (under "usage")."""
        entry: dict[str, Any] = {"status": self.status}
        if self.error:
            entry["error"] = self.error
        if self.status == OVERRUN:
            entry["since"] = self.since
            entry["timeout_s"] = timeout_s
        entry["usage"] = {"duration_ms": round(self.duration_s * 1000, 1)}
        return entry


class _Call:
    __slots__ = ("started_wall", "started_mono", "done", "finished_mono", "result", "error")

    def __init__(
        self,
        started_wall: float,
        started_mono: float,
        done: threading.Event | None = None,
        finished_mono: float = 0.0,
        result: Any = None,
        error: str | None = None,
    ) -> None:
        self.started_wall = started_wall
        self.started_mono = started_mono
        self.done: threading.Event = threading.Event() if done is None else done
        self.finished_mono = finished_mono
        self.result = result
        self.error = error


class Probe:
    """One named probe: a function run on a fresh daemon thread, one call at a time."""

    def __init__(
        self,
        name: str,
        fn: Callable[[], Any],
        timeout_s: float,
        call_age: Callable[[], float | None] | None = None,
        call_bound_s: float | None = None,
    ):
        """`timeout_s` bounds the whole round; `call_age()` (seconds the probe's call in flight
        has run, None between calls) with `call_bound_s` bounds each call of it."""
        self.name = name
        self.fn = fn
        self.timeout_s = timeout_s
        self.call_age = call_age
        self.call_bound_s = call_bound_s
        self._call: _Call | None = None

    def stuck(self) -> bool:
        """A call is in flight (running now, or hung)."""
        return self._call is not None and not self._call.done.is_set()

    def overrun(self) -> bool:
        """A call in flight for longer than the timeout, or one of its calls past its bound."""
        call = self._call
        if call is None or not self.stuck():
            return False
        return time.monotonic() - call.started_mono > self.timeout_s or self._call_overran() is not None

    def _call_overran(self) -> float | None:
        """How long the call in flight has run, when past `call_bound_s`; else None."""
        age = self.call_age() if self.call_age is not None else None
        return age if age is not None and self.call_bound_s is not None and age >= self.call_bound_s else None

    def _next_check(self, call: _Call) -> float:
        """When (monotonic) to look again: the round's deadline, or the bound of the call in flight."""
        deadline = call.started_mono + self.timeout_s
        if self.call_age is None or self.call_bound_s is None:
            return deadline
        age = self.call_age()
        return min(deadline, time.monotonic() + self.call_bound_s - (age or 0.0))

    def start(self) -> None:
        """Start a call unless the previous one is still running (then it is reused)."""
        if self.stuck():
            return
        call = _Call(time.time(), time.monotonic())
        self._call = call
        thread = threading.Thread(target=self._run, args=(call,), name=f"probe-{self.name}", daemon=True)
        thread.start()

    def _run(self, call: _Call) -> None:
        try:
            call.result = self.fn()
        except Exception as exc:  # noqa: BLE001 - any failure of a probe is reported, not raised
            call.error = error_line(exc, named=True)
        finally:
            call.finished_mono = time.monotonic()
            call.done.set()

    def wait(self) -> ProbeResult:
        """The result of the current call, waiting until its own deadline at most."""
        call = self._call
        assert call is not None, "start() first"
        while not call.done.wait(max(0.0, self._next_check(call) - time.monotonic())):
            overran = self._call_overran()
            if overran is None and time.monotonic() < call.started_mono + self.timeout_s:
                continue  # the call in flight is another than the one the wait was timed for
            error = (
                f"a call did not return within {self.call_bound_s:g} s"
                if overran is not None
                else f"no answer within {self.timeout_s:g} s"
            )
            return ProbeResult(
                self.name,
                OVERRUN,
                error=error,
                duration_s=time.monotonic() - call.started_mono,
                since=call.started_wall,
            )
        duration = call.finished_mono - call.started_mono
        if call.error is not None:
            return ProbeResult(self.name, ERROR, error=call.error, duration_s=duration)
        return ProbeResult(self.name, OK, data=call.result, duration_s=duration)


def run_probes(probes: list[Probe]) -> dict[str, ProbeResult]:
    """Start every probe at once, then collect each by its own deadline: the slowest
    answer or the longest timeout bounds the whole round, never their sum."""
    for probe in probes:
        probe.start()
    return {probe.name: probe.wait() for probe in probes}
