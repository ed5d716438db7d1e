"""`ps`'s RSS and CPU% per process, read from /proc/PID/stat between two samples (no psutil:
the supervisor answers every heartbeat's `ps`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from faden_agent.supervisor.table import ResourceSampler


def test_cpu_percent_is_measured_between_two_samples_of_a_busy_process():
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # the interpreter is up
        sampler = ResourceSampler()
        rss, first = sampler.sample(busy.pid)
        assert first == 0.0 and rss is not None and rss > 1 << 20  # a Python process holds megabytes
        time.sleep(0.5)
        rss, cpu = sampler.sample(busy.pid)
        assert cpu is not None and 2.0 < cpu <= 105.0, (
            cpu
        )  # a spinning process (on a loaded machine: a share of a core)
    finally:
        busy.kill()
        busy.wait()


def test_a_gone_process_has_no_figures_and_is_forgotten():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    sampler = ResourceSampler()
    assert sampler.sample(gone.pid) == (None, None)
    assert sampler.sample(None) == (None, None)
    sampler.sample(os.getpid())
    sampler.forget_dead(set())
    assert sampler.sample(os.getpid())[1] == 0.0  # forgotten: a first sample again
