"""The worker table that `faden-agent ps` prints and heartbeats carry: one row per worker."""

from __future__ import annotations

from typing import Any

import psutil

from faden_agent.supervisor.states import WorkerProcess


class ResourceSampler:
    """RSS and CPU% per pid; CPU% is measured between two successive samples."""

    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}

    def sample(self, pid: int | None) -> tuple[int | None, float | None]:
        if pid is None:
            return None, None
        try:
            proc = self._procs.get(pid)
            if proc is None:
                proc = self._procs[pid] = psutil.Process(pid)
                proc.cpu_percent(None)  # first call only primes the counter
            with proc.oneshot():
                return proc.memory_info().rss, proc.cpu_percent(None)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            self._procs.pop(pid, None)
            return None, None

    def forget_dead(self, live_pids: set[int]) -> None:
        for pid in list(self._procs):
            if pid not in live_pids:
                del self._procs[pid]


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
