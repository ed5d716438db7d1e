"""/dev/kmsg records: "prio,seq,usec,flags[,...];text\n" followed by " KEY=value" lines
(the kernel's dictionary, skipped). Only the kernel's own facility (prio < 8) is taken. A read
returns one record from the device, any chunk from a FIFO or file (tests): both are split on
newlines. `seq` restarts at each boot, so a position is (boot id, seq).
"""

from __future__ import annotations

import errno
import os
import select
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

READ_BYTES = 16 << 10  # more than a record may hold (the kernel refuses a smaller read: EINVAL)
MAX_PENDING = 64 << 10  # an unterminated line longer than this is dropped
POLL_S = 1.0  # a wait for more: the stop event is looked at this often; a regular file is read again
KERNEL_FACILITY_PRIOS = 8  # prio = facility << 3 | level: facility 0 is the kernel's


class KmsgRecord(NamedTuple):
    level: int
    seq: int
    usec: int  # since boot (the kernel's monotonic clock)
    text: str


def parse_record(line: bytes) -> KmsgRecord | None:
    """One record line, without its newline; None for a continuation line, another facility's
    record or one that is not a record."""
    head, sep, text = line.partition(b";")
    if not sep or line.startswith(b" "):
        return None
    fields = head.split(b",")
    if len(fields) < 3 or not all(f.isdigit() and len(f) <= 20 for f in fields[:3]):
        return None
    prio, seq, usec = (int(f) for f in fields[:3])
    if prio >= KERNEL_FACILITY_PRIOS:
        return None  # written to /dev/kmsg by a program (systemd, ...), not the kernel
    return KmsgRecord(prio & 7, seq, usec, text.decode("utf-8", errors="replace"))


def boot_wall_time() -> float:
    """Wall time of the kernel's zero (its monotonic clock started then)."""
    return time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)


def open_kmsg(path: Path) -> int:
    """A non-blocking fd on `path`: the device, a FIFO or a regular file, never a symlink."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    kind = os.fstat(fd).st_mode
    if not (stat.S_ISCHR(kind) or stat.S_ISFIFO(kind) or stat.S_ISREG(kind)):
        os.close(fd)
        raise OSError(errno.EINVAL, f"{path} is not a character device, FIFO or file")
    return fd


def records(fd: int, stopped: Callable[[], bool]) -> Iterator[KmsgRecord | None]:
    """The records read from `fd` until stopped or the writer of a FIFO went away; None each
    time nothing is there to read (the caller may save its position then)."""
    regular = stat.S_ISREG(os.fstat(fd).st_mode)
    pending = b""
    while not stopped():
        try:
            chunk = os.read(fd, READ_BYTES)
        except BlockingIOError:
            chunk = None
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                continue  # the kernel overwrote records before we read them: go on with the next
            raise
        if chunk == b"" and not regular:
            return  # a FIFO whose writer closed it
        if not chunk:
            yield None
            if regular:
                time.sleep(POLL_S)
            else:
                select.select([fd], [], [], POLL_S)
            continue
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if len(pending) > MAX_PENDING:
            pending = b""
        for line in lines:
            record = parse_record(line)
            if record is not None:
                yield record
