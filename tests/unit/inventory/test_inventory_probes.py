"""Probe isolation: a hung probe is reported as overrun on time and never delays the
others; a failing one is reported with its error; a stuck call is never started twice."""

from __future__ import annotations

import threading
import time

from faden_agent.common.errorline import ERROR_LINE_CHARS
from faden_agent.workers.inventory.probes import ERROR, OK, OVERRUN, Probe, run_probes


def test_a_hung_probe_does_not_delay_the_others():
    release = threading.Event()
    hung = Probe("hung", release.wait, timeout_s=0.5)
    fast = Probe("fast", lambda: {"x": 1}, timeout_s=0.5)
    slow = Probe("slow", lambda: time.sleep(0.3) or "done", timeout_s=2)
    try:
        started = time.monotonic()
        results = run_probes([hung, fast, slow])
        elapsed = time.monotonic() - started
        assert results["fast"].status == OK and results["fast"].data == {"x": 1}
        assert results["slow"].status == OK and results["slow"].data == "done"
        assert results["hung"].status == OVERRUN and results["hung"].error == "no answer within 0.5 s"
        assert elapsed < 1.5  # bounded by the longest single wait, not the sum

        # The next round: the stuck call is not waited for again, the others run as usual.
        started = time.monotonic()
        results = run_probes([hung, fast])
        assert time.monotonic() - started < 0.3
        assert results["hung"].status == OVERRUN and results["fast"].status == OK
        assert hung.overrun() and not fast.overrun() and not slow.overrun()
        assert sum(t.name == "probe-hung" for t in threading.enumerate()) == 1
    finally:
        release.set()


def test_a_late_answer_frees_the_probe_for_the_next_round():
    gate = threading.Event()
    probe = Probe("late", lambda: gate.wait(5) and "answer", timeout_s=0.1)
    probe.start()
    assert probe.wait().status == OVERRUN
    gate.set()
    deadline = time.monotonic() + 5
    while probe.stuck() and time.monotonic() < deadline:
        time.sleep(0.01)
    probe.start()
    result = probe.wait()
    assert result.status == OK and result.data == "answer"


def test_an_exception_is_an_error_result_with_its_message():
    def broken():
        raise ConnectionError("engine refused the connection")

    result = run_probes([Probe("docker", broken, timeout_s=1)])["docker"]
    assert result.status == ERROR and result.error == "ConnectionError: engine refused the connection"
    summary = result.summary(1)
    assert summary["status"] == ERROR and "duration_ms" in summary["usage"]


def test_an_error_is_one_bounded_line():
    """A probe's error is one bounded line in the record, not the whole text of the
    exception (a Docker error quoting a 1 MiB answer, or a traceback-like text over many lines)."""

    def verbose():
        raise RuntimeError("first line of " + "x" * 1_000_000 + "\nsecond line\nthird")

    result = run_probes([Probe("docker", verbose, timeout_s=1)])["docker"]
    assert result.status == ERROR and result.error.startswith("RuntimeError: first line of xxx")
    assert "\n" not in result.error and len(result.error) <= ERROR_LINE_CHARS


class Calls:
    """A probe whose round is many timed calls (as TracedNvml times NVML's)."""

    def __init__(self, durations: list[float]):
        self.durations = durations
        self.started: float | None = None

    def __call__(self) -> str:
        for duration in self.durations:
            self.started = time.monotonic()
            time.sleep(duration)
            self.started = None
        return "done"

    def age(self) -> float | None:
        started = self.started
        return time.monotonic() - started if started is not None else None


def test_each_call_is_bounded_on_its_own_and_a_slow_round_of_quick_calls_is_not():
    quick = Calls([0.05] * 12)  # 0.6 s in all, no call near its bound of 0.3 s
    probe = Probe("gpu", quick, 5.0, quick.age, 0.3)
    probe.start()
    assert probe.wait().status == OK
    hung = Calls([0.05, 0.05, 30.0])
    probe = Probe("gpu", hung, 30.0, hung.age, 0.3)
    started = time.monotonic()
    probe.start()
    result = probe.wait()
    assert result.status == OVERRUN and result.error == "a call did not return within 0.3 s"
    assert 0.3 <= time.monotonic() - started < 2.0  # the call's bound, not the round's 30 s
    assert probe.overrun()
