"""Scheduling with real threads: same container in order, different containers in
parallel, and a stop flag that unblocks a running job through its abort hook."""

from __future__ import annotations

import threading
import time

from faden_agent.workers.executor.commands import KINDS
from faden_agent.workers.executor.scheduler import Job, Scheduler


def make_job(command_id, name, kind="container.run"):
    spec = {"name": name, "image": "x"}
    return Job(
        id=command_id,
        kind=kind,
        spec=spec,
        deadline=time.time() + 60,
        key=KINDS[kind].queue_key(spec),
        definition=KINDS[kind],
    )


def test_same_container_in_order_different_containers_in_parallel():
    log, lock = [], threading.Lock()
    release = threading.Event()

    def execute(job):
        with lock:
            log.append(("start", job.id))
        if job.spec["name"] == "a":
            release.wait(5)
        with lock:
            log.append(("end", job.id))

    scheduler = Scheduler(execute, max_pulls=2)
    for job in (make_job("a1", "a"), make_job("a2", "a"), make_job("b1", "b")):
        scheduler.submit(job)
    deadline = time.time() + 5
    while ("end", "b1") not in log and time.time() < deadline:
        time.sleep(0.01)
    assert ("end", "b1") in log and ("start", "a2") not in log  # b ran while a1 blocked a2
    release.set()
    while scheduler.counts()["running"] + scheduler.counts()["queued"] and time.time() < deadline:
        time.sleep(0.01)
    assert log.index(("end", "a1")) < log.index(("start", "a2"))


def test_stop_runs_abort_hooks_even_when_registered_late():
    job = make_job("c1", "c")
    calls = []
    job.on_abort(lambda: calls.append("first"))
    job.stop("cancelled")
    job.on_abort(lambda: calls.append("late"))
    assert calls == ["first", "late"] and job.should_stop() and job.stop_reason == "cancelled"
    job.stop("timeout")
    assert job.stop_reason == "cancelled"  # the first reason wins
