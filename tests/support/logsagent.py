"""The log worker of a real agent, as the log tests start, measure and read it: an agent shipping
to a Loki (a receiver or the real one), its logs worker's pid and peak RSS, and what arrived."""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path

import psutil

from tests.support.agentproc import AgentProcess, agent_env, wait_for
from tests.support.lokiproc import LokiProcess
from tests.support.lokireceiver import LokiReceiver

# Documented in docs/logs.md: the log worker's RSS stays under this while Loki is down,
# whatever the size of the waiting backlog in the journal.
RSS_BOUND_BYTES = 100 * 1024 * 1024


def start_agent(tmp_path: Path, loki: LokiReceiver | LokiProcess, journal: Path, **overrides) -> AgentProcess:
    settings = dict(
        agent_id="logs-node",
        advertise_host="10.9.8.7",
        log_flush_interval_sec=0.2,
        reconnect_min_sec=0.1,
        reconnect_max_sec=0.5,
    )
    env = agent_env(tmp_path, loki_url=loki.url, journal_directory=journal, **{**settings, **overrides})
    return AgentProcess(env, tmp_path / "agent.log")  # `with` starts it


def system_lines(entries, agent_id: str = "logs-node"):
    """The system-log entries, by timestamp (a push groups lines by stream, not by time)."""
    return sorted((e for e in entries if e.labels.get("container") == f"node-{agent_id}"), key=lambda e: int(e.ts))


def logs_pid(agent: AgentProcess) -> int:
    return wait_for(lambda: (agent.workers().get("logs") or {}).get("pid"), 10, what="logs worker pid")


def assert_only_exact_duplicates(entries) -> None:
    seen = defaultdict(set)
    for e in entries:
        seen[e.line].add((e.stream, e.ts))
    inexact = {line: keys for line, keys in seen.items() if len(keys) > 1}
    assert not inexact, (
        f"{len(inexact)} lines arrived with different streams or timestamps, e.g. {next(iter(inexact.items()))}"
    )


class PeakRss:
    """Samples a process's RSS in a thread until stopped; .peak in bytes."""

    def __init__(self, pid: int, interval_s: float = 0.02):
        self.process = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval_s,), daemon=True)
        self._thread.start()

    def _run(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.NoSuchProcess:
                return

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def text(entry) -> str:
    """The line without the detail a Loki without structured metadata gets after a tab."""
    return entry.line.split("\t")[0]
