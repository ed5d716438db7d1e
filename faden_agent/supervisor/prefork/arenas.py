"""One glibc malloc arena for every thread of the tree (PSS of the whole tree): set before
the supervisor starts a thread or forks, inherited by the workers. Why (each thread's own
arena, the GIL): docs/design-notes.md.
"""

from __future__ import annotations

import ctypes

M_ARENA_MAX = -8  # glibc's malloc.h


def one_malloc_arena() -> bool:
    """Caps glibc's arenas at the main one; False where the C library has no such setting
    (not glibc) or refuses it."""
    libc = ctypes.CDLL(None)  # the process's own C library
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None or not hasattr(libc, "malloc_info"):  # malloc_info: glibc's, not musl's
        return False
    return bool(mallopt(M_ARENA_MAX, 1))
