"""pymalloc's partly used pools before the supervisor forks (PSS of the whole tree): CPython's
free lists are emptied into them, then their free blocks are taken for good, so a worker's new
small objects go to pools of its own instead of copying a shared page to write one object among
the supervisor's.
"""

from __future__ import annotations

import functools
import gc
import os
import re
import sys
from collections.abc import Callable

from faden_agent.supervisor.prefork.memfile import written_by

ALIGNMENT = 16  # pymalloc's size classes on 64-bit CPython 3.8+: 16, 32, ..., 512 bytes
BYTES_HEAD = sys.getsizeof(b"")  # a bytes object of n > 0 bytes asks pymalloc for BYTES_HEAD + n
MAX_HELD = 100_000  # blocks held for good: a bound on what a fill takes
_held: list[object] = []  # never freed: they only occupy the free blocks
# "class size num_pools blocks_in_use avail_blocks", one line per size class in use
_CLASS_LINE = re.compile(rb"^\s*\d+\s+(\d+)\s+\d+\s+\d+\s+(\d+)\s*$", re.M)


def free_blocks() -> dict[int, int]:
    """{block size: free blocks in partly used pools} from sys._debugmallocstats (written to a
    memory file: nothing touches the disk); {} where it cannot be read."""
    stats = getattr(sys, "_debugmallocstats", None)
    if stats is None:
        return {}
    try:
        text = _stderr_of(stats)
    except OSError:  # out of descriptors: the fill is an optimization, never a reason to fail a fork
        return {}
    return {int(size): int(avail) for size, avail in _CLASS_LINE.findall(text) if int(avail)}


def fill_pool_holes() -> int:
    """Takes the free blocks of every size class; returns how many it took. First the free
    lists (dead tuples, lists, dicts, floats kept for reuse, each on a shared page) go back to
    their pools: a full collection empties them."""
    gc.collect()
    taken = 0
    for size, count in free_blocks().items():
        make = filler(size)
        for _ in range(count):
            if len(_held) >= MAX_HELD:
                return taken
            _held.append(make())
            taken += 1
    return taken


def filler(size: int) -> Callable[[], object]:
    """A new object that takes one block of `size` bytes (no free list hands out an old one)."""
    if size <= ALIGNMENT:
        return object  # 16 bytes
    if size <= 2 * ALIGNMENT:
        return functools.partial(int.__add__, 1 << 40, 1)  # two 30-bit digits: 32 bytes, never cached
    return functools.partial(bytes, size - BYTES_HEAD)  # the largest bytes object of the class


def _stderr_of(write: Callable[[], None]) -> bytes:
    """What `write()` prints on the C-level stderr (file descriptor 2), through memfile.py."""
    sys.stderr.flush()

    def to(fd: int) -> None:
        saved = os.dup(2)
        try:
            os.dup2(fd, 2)
            write()
        finally:
            os.dup2(saved, 2)
            os.close(saved)

    return written_by(to)
