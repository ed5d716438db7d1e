"""One outside program (nvidia-smi, dcgmi) run in a process group of its own and bounded: a
time limit, an output cap, a stop event. At the limit or the stop the whole group gets SIGTERM
(dcgmi stops the diagnostic it launched on it), then SIGKILL after a grace; the call returns
only once the leader is reaped and the group is gone. Never raises for the program's failings.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

MAX_OUTPUT = 1 << 20  # stdout and stderr together; the rest is read and dropped
TERM_GRACE_S = 3.0  # after SIGTERM to the group, before SIGKILL
READ_SLICE_S = 0.2  # how often a stop is looked at while the program runs


class Ran(NamedTuple):
    argv: tuple[str, ...]
    exit_code: int | None  # None: it did not start, or was ended
    output: str  # stdout and stderr as they interleaved, at most MAX_OUTPUT bytes
    elapsed_s: float
    ended: str | None = None  # "time_limit" or "stopped": the group was ended by us
    error: str | None = None  # why it did not start (not found, not executable)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.ended is None and self.error is None

    def words(self, limit: int = 600) -> str:
        """The program's own words, trimmed to one bounded paragraph."""
        text = " ".join(line.strip() for line in self.output.splitlines() if line.strip())
        return text if len(text) <= limit else text[: limit - 3] + "..."


def run(
    argv: list[str],
    time_limit_s: float,
    stop: threading.Event | None = None,
    on_start: Callable[[int], None] | None = None,
    env: dict[str, str] | None = None,
) -> Ran:
    """Runs `argv` to its end, its time limit or `stop`; `on_start(pgid)` once it runs (a
    caller that must end it after a crash of its own records the group there)."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: ended as one
            env=env,
            close_fds=True,
        )
    except OSError as exc:
        return Ran(tuple(argv), None, "", 0.0, error=f"{argv[0]}: {exc.strerror or exc}")
    if on_start is not None:
        on_start(proc.pid)
    assert proc.stdout is not None
    chunks: list[bytes] = []
    kept = 0
    ended: str | None = None
    deadline = started + max(0.0, time_limit_s)
    fd = proc.stdout.fileno()
    try:
        while True:
            if stop is not None and stop.is_set():
                ended = "stopped"
                break
            left = deadline - time.monotonic()
            if left <= 0:
                ended = "time_limit"
                break
            if not select.select([fd], [], [], min(READ_SLICE_S, left))[0]:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            if kept < MAX_OUTPUT:
                chunks.append(chunk[: MAX_OUTPUT - kept])
                kept += len(chunks[-1])
        if ended is None:  # the output closed: the program (or the last of its group) is ending
            while proc.poll() is None:
                if stop is not None and stop.is_set():
                    ended = "stopped"
                    break
                if time.monotonic() >= deadline:
                    ended = "time_limit"
                    break
                time.sleep(0.02)
    finally:
        end_group(proc, ended is not None)
        proc.stdout.close()
    output = b"".join(chunks).decode(errors="replace")
    code = None if ended else proc.returncode
    return Ran(tuple(argv), code, output, round(time.monotonic() - started, 3), ended=ended)


def end_group(proc: subprocess.Popen, now: bool) -> None:
    """Reaps the leader; with `now` (or while any of its group lives) SIGTERM, then SIGKILL
    after TERM_GRACE_S, to the whole group."""
    pgid = proc.pid
    if now:
        _signal_group(pgid, signal.SIGTERM)
        until = time.monotonic() + TERM_GRACE_S
        while time.monotonic() < until and group_alive(pgid):
            proc.poll()
            time.sleep(0.02)
    if group_alive(pgid):
        _signal_group(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5.0)
    until = time.monotonic() + 5.0
    while group_alive(pgid) and time.monotonic() < until:  # a member the kernel has not yet reaped
        time.sleep(0.01)


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot, /proc/PID/stat): with the pid, one process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def end_leftover(pgid: int, started: int | None) -> bool:
    """Ends a process group an earlier run of this worker left (it was killed mid-run): only
    while its leader is the same process (its start time), or gone with members left (a pid
    is not given out again while a group of that id lives). True when one was ended."""
    if pgid <= 1 or not group_alive(pgid):
        return False
    leader = start_time(pgid)
    if leader is not None and leader != started:
        return False  # that id is another program's now
    _signal_group(pgid, signal.SIGKILL)
    return True


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie leader still counts for killpg: only live (non-zombie) members matter here
    return any(_member_alive(pid, pgid) for pid in _pids())


def _member_alive(pid: int, pgid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return len(fields) > 3 and fields[0] != b"Z" and fields[2] == str(pgid).encode()


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
