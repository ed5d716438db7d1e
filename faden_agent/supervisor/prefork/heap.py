"""The C heap (glibc's malloc) before the supervisor forks (PSS of the whole tree)."""

from __future__ import annotations

import ctypes
import functools
import os
import re

from faden_agent.supervisor.prefork.memfile import written_by

SMALL_CHUNK_LIMIT = 1024  # larger holes span whole pages, which malloc_trim gives back
TCACHE_PER_SIZE = 7  # glibc's per-thread cache: taking one chunk of a bin moves up to 7 more there
MAX_HELD = 50_000  # chunks held for good, however often workers restart
_held: list[int] = []  # addresses, never freed: they only occupy the holes

_SIZE_LINE = re.compile(rb'<size from="(\d+)" to="(\d+)" total="\d+" count="(\d+)"/>')


@functools.cache  # once per process: it runs before every fork
def _libc() -> ctypes.CDLL | None:
    libc = ctypes.CDLL(None)
    if not all(hasattr(libc, name) for name in ("malloc_info", "malloc_trim", "fdopen", "fclose")):
        return None
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.fdopen.restype = ctypes.c_void_p
    libc.fdopen.argtypes = [ctypes.c_int, ctypes.c_char_p]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    return libc


def small_holes(libc: ctypes.CDLL) -> dict[int, int]:
    """{chunk size: free chunks} of the main arena's bins under SMALL_CHUNK_LIMIT, read from
    malloc_info's XML."""
    main_arena = malloc_info_xml(libc).split(b'<heap nr="1">')[0]
    holes: dict[int, int] = {}
    for low, high, count in _SIZE_LINE.findall(main_arena):
        if low == high and int(low) < SMALL_CHUNK_LIMIT:
            size = int(low) & ~15  # the printed size carries a flag bit
            holes[size] = holes.get(size, 0) + int(count)
    return holes


def malloc_info_xml(libc: ctypes.CDLL) -> bytes:
    """glibc's malloc_info (memfile.py); b"" when it cannot be read, e.g. out of descriptors:
    the fill is an optimization, never a reason for a fork to fail."""

    def write(fd: int) -> None:
        copy = os.dup(fd)
        stream = libc.fdopen(copy, b"w")
        if not stream:
            os.close(copy)
            raise OSError("fdopen failed")
        libc.malloc_info(0, stream)
        libc.fclose(stream)  # closes the copy

    try:
        return written_by(write)
    except OSError:
        return b""


def fill_heap_holes() -> int:
    """Takes the small free chunks of the main arena (and the thread cache of each such
    size); returns how many chunks it took."""
    libc = _libc()
    if libc is None:
        return 0
    taken = 0
    for size, count in small_holes(libc).items():
        for _ in range(count + TCACHE_PER_SIZE):
            if len(_held) >= MAX_HELD:
                return taken
            # A request of size - 8 is served by a chunk of exactly `size` (8 bytes of header).
            _held.append(libc.malloc(size - 8))
            taken += 1
    return taken


def release_free_heap() -> bool:
    """Hands the C heap's free pages back to the kernel (malloc_trim), so they are not
    counted as shared memory of every worker; False where there is no such call."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
