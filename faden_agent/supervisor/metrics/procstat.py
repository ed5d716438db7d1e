"""CPU, RSS and PSS of the agent's processes from /proc, as cheap as a scrape a second needs.

Owns one open /proc/PID/stat per process, re-read in place (a dead process's read fails and
its descriptor is closed) at most every USAGE_SAMPLE_S, PSS (the kernel walks every page)
every PSS_SAMPLE_S; a changed set of processes is read at once. Closed in forked children.
"""

from __future__ import annotations

import os
import time

USAGE_SAMPLE_S = 5.0  # a scrape sooner than this gets the figures read last (scrapes 5 s apart: fresh)
PSS_SAMPLE_S = 300.0  # about 1 ms a process
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")
STAT_BYTES = 1024  # a stat line is about 300 bytes; its command name is at most 64


class ProcessUsage:
    def __init__(self, sample_s: float = USAGE_SAMPLE_S) -> None:
        self.sample_s = sample_s
        self._stat_fds: dict[int, int] = {}
        self._pss: dict[int, int | None] = {}
        self._pss_at = -PSS_SAMPLE_S
        self._last: tuple[dict[str, int], float, dict[str, tuple[float, int, int | None]]] = ({}, 0.0, {})

    def read(self, pids: dict[str, int]) -> dict[str, tuple[float, int, int | None]]:
        """Process name -> (CPU seconds, RSS bytes, PSS bytes or None); a gone process is left out.
        Within sample_s of the last read of the same processes: that read's figures (the same dict)."""
        now = time.monotonic()
        last_pids, read_at, figures = self._last
        if pids == last_pids and now - read_at < self.sample_s:
            return figures
        fresh_pss = now - self._pss_at >= PSS_SAMPLE_S
        if fresh_pss:
            self._pss_at = now
        live = set(pids.values())
        for pid in [pid for pid in self._stat_fds if pid not in live]:
            os.close(self._stat_fds.pop(pid))
        self._pss = {pid: self._pss[pid] if pid in self._pss and not fresh_pss else process_pss(pid) for pid in live}
        out: dict[str, tuple[float, int, int | None]] = {}
        for name, pid in pids.items():
            cpu_rss = self._cpu_and_rss(pid)
            if cpu_rss is not None:
                out[name] = (*cpu_rss, self._pss.get(pid))
        self._last = (dict(pids), now, out)
        return out

    def close(self) -> None:
        for fd in self._stat_fds.values():
            os.close(fd)
        self._stat_fds.clear()

    def _cpu_and_rss(self, pid: int) -> tuple[float, int] | None:
        if (kept := self._stat_fds.get(pid)) is not None:
            try:
                return parse_stat(os.pread(kept, STAT_BYTES, 0))
            except OSError:  # reaped (ESRCH), its pid perhaps another process's now: open anew
                os.close(self._stat_fds.pop(pid))
        try:
            fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            line = os.pread(fd, STAT_BYTES, 0)
        except OSError:
            os.close(fd)
            return None
        self._stat_fds[pid] = fd
        return parse_stat(line)


def parse_stat(line: bytes) -> tuple[float, int] | None:
    """(CPU seconds, RSS bytes) from a /proc/PID/stat line; None when it is not one."""
    try:
        fields = line.rsplit(b") ", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS, int(fields[21]) * PAGE_SIZE
    except (IndexError, ValueError):
        return None


def process_pss(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
            for line in rollup:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None
