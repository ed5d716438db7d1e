"""CPU seconds of a whole process tree, ended threads and processes included: a cpuacct
cgroup of the bench's own (nanoseconds; cgroup v1, root), which the tree's first process
enters before it execs. Where none can be made, None: callers sum /proc/PID/stat (10 ms
ticks, live processes only) and say so."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
TICK_S = 1 / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def cpu_group() -> Iterator[Path | None]:
    """A cpuacct cgroup (removed after; its processes must have ended), or None."""
    path = CPUACCT / f"faden-bench-{uuid.uuid4().hex[:8]}"
    try:
        path.mkdir()
    except OSError:
        yield None
        return
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            path.rmdir()


def in_group(group: Path | None, argv: list[str]) -> list[str]:
    """argv started inside `group` (a shell enters it, then execs argv)."""
    if group is None:
        return argv
    return ["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "sh", *argv]


def group_cpu_s(group: Path) -> float:
    return int((group / "cpuacct.usage").read_text()) / 1e9


def process_cpu_s(pid: int) -> float:
    """utime + stime of a live process (its ended threads included), in seconds (10 ms ticks)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S
