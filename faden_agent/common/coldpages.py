"""Library pages a process touched only to start, handed back to the kernel: the supervisor's
before it forks, each worker's once it is set up (the libraries it loaded itself). Only
pages no other process maps go; what runs again is read back, one page a fault."""

from __future__ import annotations

import ctypes
import functools
import logging

log = logging.getLogger(__name__)

MADV_RANDOM = 1
MADV_PAGEOUT = 21


@functools.cache
def _madvise() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    libc = ctypes.CDLL(None, use_errno=True)
    madvise = getattr(libc, "madvise", None)
    if madvise is not None:
        madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        madvise.restype = ctypes.c_int
    return madvise


def read_only_file_mappings(maps: str) -> list[tuple[int, int]]:
    """(start, end) of each mapping in /proc/PID/maps text that is a file's, private and not
    writable: code, read-only data and symbol tables."""
    spans = []
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[5].startswith("/") or fields[5].endswith(" (deleted)"):
            continue
        perms = fields[1]
        if "w" in perms or perms[3] != "p" or perms[0] != "r":
            continue
        start, _, end = fields[0].partition("-")
        spans.append((int(start, 16), int(end, 16)))
    return spans


def page_out_cold_libraries() -> int:
    """Advises every read-only file mapping of this process as above; returns the bytes
    advised (0 where the kernel or C library cannot)."""
    madvise = _madvise()
    if madvise is None:
        return 0
    try:
        with open("/proc/self/maps") as maps:
            spans = read_only_file_mappings(maps.read())
    except OSError:
        return 0
    advised = 0
    for start, end in spans:
        if madvise(start, end - start, MADV_PAGEOUT) != 0:  # EINVAL before Linux 5.4
            log.debug("MADV_PAGEOUT refused at %#x (errno %d): those pages stay", start, ctypes.get_errno())
            continue
        madvise(start, end - start, MADV_RANDOM)
        advised += end - start
    return advised
