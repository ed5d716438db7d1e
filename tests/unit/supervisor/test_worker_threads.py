"""The worker's supervised threads (faden_agent/workers/threads.py), in one process."""

from __future__ import annotations

import threading
import time

from faden_agent.workers.threads import WorkerThreads


def keeper() -> tuple[WorkerThreads, threading.Event]:
    woken = threading.Event()
    return WorkerThreads("test", woken.set), woken


def test_a_critical_thread_that_raises_fails_the_worker_naming_thread_and_error():
    threads, woken = keeper()

    def boom() -> None:
        raise OSError(28, "No space left on device")

    threads.start("downlink", boom)
    assert woken.wait(5)
    assert threads.failure == {"thread": "downlink", "error": "OSError: [Errno 28] No space left on device"}


def test_a_critical_thread_that_returns_early_fails_the_worker_but_a_finite_one_does_not():
    threads, woken = keeper()
    threads.start("membership", lambda: None, finite=True)
    threads.start("other", lambda: None, critical=False)
    threads.join(2)
    assert not woken.is_set() and threads.failure is None
    threads.start("engine-probe", lambda: None)
    assert woken.wait(5) and threads.failure["thread"] == "engine-probe"


def test_a_non_critical_thread_may_die_and_a_stopping_worker_ignores_deaths():
    threads, woken = keeper()
    threads.start("follower", lambda: 1 / 0, critical=False)
    threads.join(2)
    assert threads.failure is None
    stopping, _ = keeper()

    def until_stop_then_raise() -> None:
        stopping.stop_event.wait()
        raise ConnectionError("closed by the stop")

    stopping.start("uplink", until_stop_then_raise)
    stopping.stop()
    assert stopping.join(2) == [] and stopping.failure is None


def test_the_first_failure_wins_and_the_error_is_one_bounded_line():
    threads, woken = keeper()

    def long_error() -> None:
        raise ValueError("x" * 1000 + "\nsecond line")

    threads.start("a", long_error)
    assert woken.wait(5)
    threads.start("b", lambda: 1 / 0)
    threads.join(1)
    assert threads.failure["thread"] == "a" and len(threads.failure["error"]) == 200


def test_one_join_budget_for_all_threads():
    threads, _ = keeper()
    for n in range(3):
        threads.start(f"stuck{n}", time.sleep, 30, critical=False)  # ignores the stop event
    assert sorted(threads.join(0.5)) == ["stuck0", "stuck1", "stuck2"]
    deadline = threads._join_deadline
    assert threads.join(60) == ["stuck0", "stuck1", "stuck2"]  # no new budget: the first deadline holds
    assert threads._join_deadline == deadline
