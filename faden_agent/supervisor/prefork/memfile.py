"""What C code writes to a file descriptor, caught in a memory file (nothing touches the disk):
how the allocator tricks read glibc's and pymalloc's own reports of their free space."""

from __future__ import annotations

import os
from collections.abc import Callable


def written_by(write: Callable[[int], None]) -> bytes:
    """Calls `write(fd)` with a fresh memory file's descriptor and returns what it wrote.
    Raises OSError (out of descriptors, say): the callers' fills are optimizations and skip."""
    memory = os.memfd_create("prefork-report")
    try:
        write(memory)
        os.lseek(memory, 0, os.SEEK_SET)
        blocks = []
        while block := os.read(memory, 65536):
            blocks.append(block)
        return b"".join(blocks)
    finally:
        os.close(memory)
