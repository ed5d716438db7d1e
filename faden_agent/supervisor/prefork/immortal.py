"""Marks the supervisor's objects immortal before it forks, so the workers' reference
counting stops copying the pages they share (PSS of the whole tree).
"""

from __future__ import annotations

import ctypes
import gc
import operator
import sys
import types

# _Py_IMMORTAL_REFCNT of 64-bit CPython 3.12 and 3.13 (Include/object.h): the low 32 bits
# set; Py_INCREF and Py_DECREF leave such an object alone.
IMMORTAL_REFCNT = 0xFFFFFFFF
LAYOUT_VERSIONS = ((3, 12), (3, 13))  # where ob_refcnt is a plain Py_ssize_t at offset 0
ADDRESS_WORDS = 1 << 60  # 32-bit words: every address a 64-bit process can have (2^62 bytes)
# What a code object holds: it shows the collector none of it (gc.get_referents gives nothing),
# and a constant reachable only from there would stay mortal: every run of the code counts it,
# so each worker copied the page it lies on (docs/benchmarks.md, round 12).
CODE_PARTS = operator.attrgetter(
    "co_consts", "co_names", "co_filename", "co_name", "co_qualname", "co_linetable", "co_exceptiontable"
)


def unsupported_reason() -> str | None:
    """Why this interpreter's objects cannot be marked (None: they can)."""
    version = "{}.{}".format(*sys.version_info[:2])
    if sys.implementation.name != "cpython":
        return f"{sys.implementation.name} is not CPython"
    if sys.version_info[:2] not in LAYOUT_VERSIONS:
        return f"CPython {version} (its object header is not the one of 3.12 and 3.13)"
    if sys.maxsize < 2**32:
        return "a 32-bit build"
    # the ABI's "t" flag, not sysconfig's Py_GIL_DISABLED: that reads the build's whole
    # configuration, 0.6 MiB of objects the supervisor would hold for the workers' lifetime
    if "t" in getattr(sys, "abiflags", ""):
        return "a free-threaded build"
    if hasattr(sys, "gettotalrefcount"):
        return "a debug build"
    return None


def immortalize_heap() -> int:
    """Marks every object the collector tracks, every module and everything they reach (a
    code object's constants and names too) immortal; returns how many it marked (0 where
    unsupported_reason() says why not). Call it with no other thread running Python code and
    before gc.freeze(), whose frozen objects gc.get_objects() no longer lists."""
    if unsupported_reason() is not None:
        return 0
    # The low 32 bits of each object's count, indexed by address / 4: one C-level store an
    # object (a ctypes object per address cost twice the time; objects are 8-byte aligned).
    counts = (ctypes.c_uint32 * ADDRESS_WORDS).from_address(0)
    refcount = sys.getrefcount
    referents = gc.get_referents
    code = types.CodeType
    pending = gc.get_objects()
    pending.extend(sys.modules.values())
    marked = 0
    while pending:  # breadth first: one get_referents call a level
        fresh: list[object] = []
        keep = fresh.append
        for obj in pending:
            if refcount(obj) < IMMORTAL_REFCNT:  # immortal already: the interpreter's own, or reached before
                counts[id(obj) >> 2] = IMMORTAL_REFCNT
                keep(obj)
        marked += len(fresh)
        pending = referents(*fresh)
        for parts in map(CODE_PARTS, [obj for obj in fresh if type(obj) is code]):
            pending.extend(parts)
    return marked
