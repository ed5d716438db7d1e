"""The worker table that `faden-agent ps` prints and heartbeats carry: one row per worker."""

from __future__ import annotations

import os
import time
from typing import Any

from faden_agent.supervisor.metrics.procstat import STAT_BYTES, parse_stat
from faden_agent.supervisor.states import WorkerProcess


class ResourceSampler:
    """RSS and CPU% per pid from /proc/PID/stat; CPU% is measured between two successive
    samples of the same pid (its first sample says 0.0)."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[float, float]] = {}  # pid -> (CPU seconds, monotonic time)

    def sample(self, pid: int | None) -> tuple[int | None, float | None]:
        if pid is None:
            return None, None
        try:
            fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._last.pop(pid, None)
            return None, None
        try:
            figures = parse_stat(os.pread(fd, STAT_BYTES, 0))
        except OSError:
            figures = None
        finally:
            os.close(fd)
        if figures is None:
            self._last.pop(pid, None)
            return None, None
        cpu_s, rss = figures
        now = time.monotonic()
        was_cpu, was_at = self._last.get(pid, (cpu_s, now))
        self._last[pid] = (cpu_s, now)
        percent = (cpu_s - was_cpu) / (now - was_at) * 100 if now > was_at else 0.0
        return rss, round(max(percent, 0.0), 1)

    def forget_dead(self, live_pids: set[int]) -> None:
        for pid in list(self._last):
            if pid not in live_pids:
                del self._last[pid]


def worker_row(worker: WorkerProcess, resources: tuple[int | None, float | None] = (None, None)) -> dict[str, Any]:
    uptime = worker.uptime()
    age = worker.liveness_age()
    rss, cpu = resources
    return {
        "name": worker.name,
        "state": worker.state.value,
        "pid": worker.pid,
        "uptime_s": round(uptime, 3) if uptime is not None else None,
        "restarts": worker.restarts,
        "last_exit": worker.last_exit,
        "exit_cause": worker.exit_cause,
        "alive_age_s": round(age, 3) if age is not None else None,
        "heartbeat_age_s": round(age, 3) if age is not None else None,  # its old name, sent for one release
        "rss_bytes": rss,
        "cpu_percent": cpu,
        "status": worker.status,
    }
