"""Marks the supervisor's objects immortal before it forks, so the workers' reference
counting stops copying the pages they share (issue 16: PSS of the whole tree).

CPython writes an object's reference count each time it takes or drops a reference:
calling a function writes the function and its code object, reading a module global writes
the value, every new instance writes its class. In a forked worker each such write copies
the 4 KiB page the object lives on, so the supervisor's imported modules, shared on paper,
end up copied page by page into every worker (8-9 MiB each, measured with pagemap).

CPython 3.12 made objects whose count reads _Py_IMMORTAL_REFCNT immortal (PEP 683): taking
and dropping a reference to one writes nothing. The interpreter gives that count to its
static objects only; PEP 683 names "pre-fork" servers as the use it was made for, but
offers no call to mark one's own objects. immortalize_heap() writes the count itself,
through ctypes, into every object the collector tracks and everything they reach (about
85,000 objects, 0.08 s), once, before the first fork. Measured on the idle agent: copied
pages per worker 7.3-8.6 -> 4.4-5.5 MiB, whole tree 70.5 -> 58.8 MiB on 3.12.1 (72.5 ->
61.8 on 3.13.0).

What it costs: a marked object is never freed. Everything marked is what the supervisor
holds at that moment (modules, their functions and classes, the configuration), which lives
as long as the process anyway; garbage is collected first (preload.py).

Where the object header is laid out otherwise (3.11 and older have no immortal objects,
3.14 moved flags into the count's word, free-threaded and debug builds count differently)
nothing is written: the agent runs the same, with more memory per worker.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import sysconfig

# _Py_IMMORTAL_REFCNT of 64-bit CPython 3.12 and 3.13 (Include/object.h): the low 32 bits
# set; Py_INCREF and Py_DECREF leave such an object alone.
IMMORTAL_REFCNT = 0xFFFFFFFF
LAYOUT_VERSIONS = ((3, 12), (3, 13))  # where ob_refcnt is a plain Py_ssize_t at offset 0


def unsupported_reason() -> str | None:
    """Why this interpreter's objects cannot be marked (None: they can)."""
    version = "{}.{}".format(*sys.version_info[:2])
    if sys.implementation.name != "cpython":
        return f"{sys.implementation.name} is not CPython"
    if sys.version_info[:2] not in LAYOUT_VERSIONS:
        return f"CPython {version} (its object header is not the one of 3.12 and 3.13)"
    if sys.maxsize < 2**32:
        return "a 32-bit build"
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return "a free-threaded build"
    if hasattr(sys, "gettotalrefcount"):
        return "a debug build"
    return None


def immortalize_heap() -> int:
    """Marks every object the collector tracks, every module and everything they reach
    immortal; returns how many it marked (0 where unsupported_reason() says why not).
    Call it with no other thread running Python code and before gc.freeze(), whose frozen
    objects gc.get_objects() no longer lists."""
    if unsupported_reason() is not None:
        return 0
    count_of = ctypes.c_ssize_t.from_address
    pending = gc.get_objects()
    pending.extend(sys.modules.values())
    marked = 0
    while pending:
        obj = pending.pop()
        count = count_of(id(obj))
        if count.value & IMMORTAL_REFCNT == IMMORTAL_REFCNT:
            continue  # immortal already (the interpreter's own, or reached before)
        count.value = IMMORTAL_REFCNT
        marked += 1
        pending.extend(gc.get_referents(obj))
    return marked
