"""ProcessUsage (supervisor/metrics/procstat.py): each process's CPU and PSS reread through a kept
descriptor, let go of when the process is gone, read again only after its interval."""

from __future__ import annotations

import os
import subprocess
import sys

from faden_agent.supervisor.metrics.procstat import ProcessUsage


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_process_usage_rereads_each_process_in_place_and_lets_go_of_a_gone_one():
    busy = subprocess.Popen(
        [sys.executable, "-c", "import sys\nwhile sys.stdin.read(1): sum(range(10**6))"], stdin=subprocess.PIPE
    )
    usage = ProcessUsage(sample_s=0)  # every read reads
    try:
        before = open_fds()
        first = usage.read({"busy": busy.pid, "self": os.getpid()})
        assert first["busy"][1] > 0 and first["busy"][2] is not None  # a new process's PSS at once
        held = open_fds() - before
        assert len(held) == 2
        cpu = first["busy"][0]
        while cpu <= first["busy"][0]:  # the kept descriptor shows the figures of now
            busy.stdin.write(b"x" * 20)
            busy.stdin.flush()
            cpu = usage.read({"busy": busy.pid, "self": os.getpid()})["busy"][0]
        assert open_fds() - before == held  # no new descriptor per read
        busy.kill()
        busy.wait()
        assert "busy" not in usage.read({"busy": busy.pid, "self": os.getpid()})
        assert len(open_fds() - before) == 1
        usage.read({"self": os.getpid()})
    finally:
        busy.kill()
        busy.wait()
        usage.close()
    assert not open_fds() - before


def test_process_usage_is_read_again_only_after_its_interval_or_when_the_processes_change():
    usage = ProcessUsage(sample_s=60)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        first = usage.read({"self": os.getpid()})
        spent = os.times().user
        while os.times().user < spent + 0.05:  # a few ticks of CPU the next read would show
            sum(range(10**5))
        assert usage.read({"self": os.getpid()}) is first  # the same processes within the interval
        both = usage.read({"self": os.getpid(), "sleeper": sleeper.pid})  # a new process: read at once
        assert both["sleeper"][1] > 0 and both["self"][0] > first["self"][0]
    finally:
        sleeper.kill()
        sleeper.wait()
        usage.close()
