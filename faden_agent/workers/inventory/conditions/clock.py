"""The kernel's clock discipline as adjtimex(2) reports it (read only: modes 0), or as a file
of `adjtimex --print`'s `name: value` lines (CLOCK_STATUS_FILE, for tests): its `status` bits
and `maxerror` (microseconds)."""

from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path
from typing import NamedTuple

STA_UNSYNC = 0x0040
MAX_FILE = 4096


class ClockStatus(NamedTuple):
    status: int
    maxerror_us: int

    @property
    def unsync_flag(self) -> bool:
        return bool(self.status & STA_UNSYNC)


class _Timex(ctypes.Structure):
    """struct timex of <sys/timex.h> (the same on x86_64 and aarch64: longs, then padding)."""

    _fields_ = [
        ("modes", ctypes.c_uint),
        ("offset", ctypes.c_long),
        ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long),
        ("esterror", ctypes.c_long),
        ("status", ctypes.c_int),
        ("constant", ctypes.c_long),
        ("precision", ctypes.c_long),
        ("tolerance", ctypes.c_long),
        ("time_sec", ctypes.c_long),
        ("time_usec", ctypes.c_long),
        ("tick", ctypes.c_long),
        ("ppsfreq", ctypes.c_long),
        ("jitter", ctypes.c_long),
        ("shift", ctypes.c_int),
        ("stabil", ctypes.c_long),
        ("jitcnt", ctypes.c_long),
        ("calcnt", ctypes.c_long),
        ("errcnt", ctypes.c_long),
        ("stbcnt", ctypes.c_long),
        ("tai", ctypes.c_int),
        ("padding", ctypes.c_int * 11),
    ]


def read_clock(status_file: Path | None = None) -> ClockStatus:
    """The clock's status now; OSError or ValueError (one line) when it cannot be read."""
    if status_file is not None:
        return _from_file(status_file)
    timex = _Timex()
    if _libc().adjtimex(ctypes.byref(timex)) < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"adjtimex: {os.strerror(code)}")
    return ClockStatus(timex.status, timex.maxerror)


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library the interpreter runs on (its symbols are the process's own: no search)."""
    return ctypes.CDLL(None, use_errno=True)


def _from_file(path: Path) -> ClockStatus:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        text = os.read(fd, MAX_FILE).decode("utf-8", "replace")
    finally:
        os.close(fd)
    values: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            values[name.strip()] = value.strip()
    try:
        return ClockStatus(int(values["status"]), int(values["maxerror"]))
    except (KeyError, ValueError):
        raise ValueError(f"{path}: no whole-number `status:` and `maxerror:` lines") from None
