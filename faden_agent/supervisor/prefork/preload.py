"""What the supervisor imports before it forks, so the workers share it instead of each
importing its own copy (issue 16: PSS of the whole tree, and a restarted worker that does
not spend its first 100 ms importing).

Every worker's module (and so what it imports at module level: requests, urllib3, ssl,
the docker SDK, ...) plus the docker SDK that the log worker imports lazily. Importing
starts nothing (no thread, socket, NVML or Docker call); pynvml stays out: only the
inventory worker's GPU probe loads it, and only where the NVML library opens.

After the imports the supervisor rehearses the workers' first HTTP, Docker and SQLite
calls against throwaway servers of its own (rehearsal.py: the writes those first calls
make to shared code and caches then happen once, here; its threads are joined before any
fork) and freezes everything (gc.freeze): its collector then never writes to the shared
objects' headers, which would copy their pages into the supervisor; each child freezes
what it inherits first thing (arbiter.spawn_worker).

Where the private memory of a worker comes from (issue 16, measured by comparing each
worker's page frames with the supervisor's in /proc/PID/pagemap): 8-10 MiB of each worker's
9-13 MiB are inherited pages it wrote to, not objects of its own. CPython writes a refcount
on every object it touches (calling a function writes its function and code object), and
3.11's specializing interpreter writes version tags into the dicts and types it caches and
rewrites the bytecode it runs. CPython 3.12 and 3.13 make their own static objects immortal,
which alone left the tree as large; immortal.py marks the supervisor's objects too, which
halves the copying (the rest is mostly the bytecode the workers run). A new small object
put into a free block of an inherited pool would copy one more page: fill_pools() removes
that cause before each fork, and heap.py the same for the C heap. Last, coldpages.py hands
the library pages that only start-up touched back to the kernel before the first fork.
Importing the workers' own modules after the fork instead was measured too: 2-6 MiB more
over the tree (each import's garbage and its whole module are private, where preloaded only
the touched pages are).
"""

from __future__ import annotations

import gc
import importlib
import logging
import os
import sys
import warnings
from collections.abc import Callable

from faden_agent.errorline import error_line
from faden_agent.supervisor.prefork.coldpages import page_out_cold_libraries
from faden_agent.supervisor.prefork.heap import fill_heap_holes, release_free_heap
from faden_agent.supervisor.prefork.immortal import immortalize_heap, unsupported_reason
from faden_agent.supervisor.prefork.rehearsal import rehearse

log = logging.getLogger(__name__)

SHARED_MODULES = ("docker",)  # imported lazily by some workers, used by three of four
# requests guesses the charset of a body that names none with charset_normalizer, which
# imports all of Python's ~100 codecs: 2.7 MiB of objects in every worker. The agent never
# needs the guess (what it reads is JSON or names its charset); without it requests decodes
# such a body as UTF-8 (Response.apparent_encoding).
CHARSET_GUESSERS = ("charset_normalizer", "chardet")


def preload(targets: list[str], tls_verify: bool | str | None = None, skip: frozenset[str] = frozenset()) -> None:
    """Imports each worker target's module and SHARED_MODULES, builds the client TLS context
    for `tls_verify` (None: nothing the agent knows of speaks https), then freezes the heap.
    A module or CA bundle that fails is left to its worker, which reports the failure.
    `skip` names the memory tricks (prefork.TRICKS) left out."""
    skip_charset_guessers()
    for module in [t.partition(":")[0] for t in targets] + list(SHARED_MODULES):
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - the worker's own import reports it properly
            log.warning("preloading %s failed (its worker imports it again): %s", module, exc)
    if tls_verify is not None:
        share_tls_context(tls_verify)
    if "rehearsal" not in skip:
        rehearse()  # the workers' first HTTP, Docker and SQLite calls, once for all (rehearsal.py)
    gc.collect()
    if "pools" not in skip:
        fill_pools()
    # before freeze: frozen objects are no longer listed
    marked = immortalize_heap() if "immortal" not in skip else None
    gc.freeze()
    if "heap" not in skip:
        release_free_heap()
        fill_heap_holes()  # fill_pools() for the C heap (heap.py)
    if "coldpages" not in skip:
        page_out_cold_libraries()  # start-up's library pages back to the kernel (coldpages.py)
    if marked:
        log.debug("marked %d objects immortal before forking", marked)
    elif marked == 0:
        log.info("objects stay mortal under %s: each worker copies more of them (issue 16)", unsupported_reason())
    fills = [fill for name, fill in (("pools", fill_pools), ("heap", fill_heap_holes)) if name not in skip]
    if fills:
        supervisor = os.getpid()
        os.register_at_fork(before=lambda: refill_before_fork(supervisor, fills))


def refill_before_fork(supervisor: int, fills: list[Callable[[], object]]) -> None:
    """Again before every later fork (a restart): the supervisor's own work leaves holes."""
    if os.getpid() == supervisor:
        for fill in fills:
            fill()


def share_tls_context(verify: bool | str) -> None:
    """The one client TLS context (tls.py), built here so every worker shares its parsed
    certificate store (4.4 MiB for the public bundle) instead of building its own."""
    from faden_agent.tls import client_context  # after skip_charset_guessers: it imports requests

    try:
        client_context(verify)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        log.warning("the TLS context was not built before forking (each worker tries again): %s", error_line(exc))


def skip_charset_guessers() -> None:
    """Makes requests load without a charset guesser (CHARSET_GUESSERS); a no-op once requests
    is loaded."""
    if "requests" in sys.modules:
        return
    for name in CHARSET_GUESSERS:
        sys.modules.setdefault(name, None)  # None: the import fails, and requests falls back
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Unable to find acceptable character detection")
        import requests  # noqa: F401 - loaded here, under the filter, for every worker


_FILLERS: list = []  # kept for the life of the process: they only occupy blocks
MAX_FILLERS = 200_000  # about 10 MiB at most, however often workers restart


def free_blocks_by_size() -> dict[int, int]:
    """{block size: free blocks in pools in use} of CPython's small-object allocator, read
    from sys._debugmallocstats (written to fd 2); {} where it is unavailable."""
    debug = getattr(sys, "_debugmallocstats", None)
    if debug is None:
        return {}
    read_fd, write_fd = os.pipe()
    saved = os.dup(2)
    try:
        sys.stderr.flush()
        os.dup2(write_fd, 2)
        debug()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        text = pipe.read().decode(errors="replace")
    free = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 5 and all(f.isdigit() for f in fields):
            free[int(fields[1])] = int(fields[4])
    return free


def fill_pools(rounds: int = 3) -> int:
    """Fill every free block of the allocator's partly used pools, before fork: a child's
    new objects then go to fresh pools of its own instead of into the inherited pages, each
    of which a write would copy (CPython 3.11 has no other way to keep them apart).
    Returns the blocks filled."""
    filled = 0
    for _ in range(rounds):
        if len(_FILLERS) >= MAX_FILLERS:
            break
        free = free_blocks_by_size()
        if not any(free.values()):
            break
        for size, count in free.items():
            if size <= 16:  # a bytearray's buffer of up to 15 bytes (its object is larger)
                _FILLERS.extend(bytearray(size - 1) for _ in range(count))
            elif size <= 32:
                _FILLERS.extend(float(i) for i in range(count))  # 24 bytes
            else:
                _FILLERS.extend(bytes(size - 33) for _ in range(count))
            filled += count
    return filled
