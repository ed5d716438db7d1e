"""What the supervisor loads before it forks: the module of each worker that starts with it
(not one started on demand) and SHARED_MODULES, what two or more workers load, so the workers
share one copy. Importing starts nothing (no thread, socket, NVML or Docker call); what only
a command or a request needs loads where it is first used. Then the tricks not skipped
(prefork.TRICKS, each loaded only to run) and gc.freeze. Why: docs/design-notes.md.
"""

from __future__ import annotations

import gc
import importlib
import importlib.machinery
import importlib.util
import logging
import os
import sys
import time
import types
import warnings

from faden_agent.common.errorline import error_line

log = logging.getLogger(__name__)

# What two or more workers load, whichever of them starts first (a worker started on demand
# imports its own module after its fork; tests/unit/supervisor/test_lean_imports.py holds the
# list to that): the engine's and the backend's HTTP clients, the outbox and its producers,
# membership, and the small shared pieces. Not the Docker SDK: only commands load it.
SHARED_MODULES = (
    "concurrent.futures",
    "heapq",
    "pwd",
    "queue",
    "subprocess",
    "faden_agent.engine.containers",
    "faden_agent.common.wakeable",
    "faden_agent.backend.producer",
    "faden_agent.backend.client",
    "faden_agent.ipc.control",
    "faden_agent.node.backend_accepts",
    "faden_agent.node.drainstate",
    "faden_agent.node.gpu_faults",
    "faden_agent.node.journalctl",
    "faden_agent.node.membership",
    "faden_agent.node.sysfs",
    "faden_agent.node.xid_catalogue",
    "faden_agent.protocol.container",
    "faden_agent.protocol.inventory",
    "faden_agent.protocol.link",
)
# requests (the Docker SDK's, loaded by the executor's first command) guesses the charset of a
# body that names none with charset_normalizer, which imports all of Python's ~100 codecs: 2.7
# MiB of objects. The agent never needs the guess (what it reads is JSON or names its charset);
# without it requests decodes such a body as UTF-8 (Response.apparent_encoding).
CHARSET_GUESSERS = ("charset_normalizer", "chardet")
HTTP2 = "urllib3.http2"


def preload(targets: list[str], tls_verify: bool | str | None = None, skip: frozenset[str] = frozenset()) -> None:
    """Imports each target's module (workers' "module:Class") and SHARED_MODULES, builds the
    client TLS context for `tls_verify` (None: nothing the agent knows of speaks https), then
    freezes the heap. A module or CA bundle that fails is left to its worker, which reports
    the failure. `skip` names the memory tricks (prefork.TRICKS) left out."""
    steps = StepClock()
    if "arenas" not in skip:  # before any thread: each would get an arena of its own
        from faden_agent.supervisor.prefork.arenas import one_malloc_arena

        one_malloc_arena()
    skip_charset_guessers()
    for module in [t.partition(":")[0] for t in targets] + list(SHARED_MODULES):
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - the worker's own import reports it properly
            log.warning("preloading %s failed (its worker imports it again): %s", module, exc)
    steps.done("imports")
    if tls_verify is not None:
        share_tls_context(tls_verify)
        steps.done("tls")
    if "warmup" not in skip:  # before the heap is frozen: what the calls leave is shared too
        from faden_agent.supervisor.prefork.warmup import warm_up

        warm_up()  # the workers' first Docker calls, specialized once for all (warmup.py)
        steps.done("warmup")
    if "versions" not in skip:  # before the walk: nothing it stamps is left mortal
        from faden_agent.supervisor.prefork.versions import stamp_versions

        stamp_versions()
        steps.done("versions")
    # A young collection frees the cycles the steps above left (the warm-up's clients and
    # threads, ~50 objects); the automatic ones freed those of the imports. A full one found
    # no more and cost 6-7 ms of the start (docs/benchmarks.md, round 19).
    gc.collect(1)
    marked = None
    if "immortal" not in skip:
        from faden_agent.supervisor.prefork.immortal import immortalize_heap

        marked = immortalize_heap()  # before freeze: frozen objects are no longer listed
    gc.freeze()
    steps.done("immortal" if marked is not None else "freeze")
    if "heap" not in skip:
        from faden_agent.supervisor.prefork.heap import fill_heap_holes, release_free_heap

        release_free_heap()
        fill_heap_holes()  # a child's first mallocs go to fresh pages (heap.py)
        steps.done("heap")
    if "coldpages" not in skip:
        from faden_agent.common.coldpages import page_out_cold_libraries

        page_out_cold_libraries()  # start-up's library pages back to the kernel (coldpages.py)
        steps.done("coldpages")
    if "pools" not in skip:  # last: the steps before leave free blocks of their own
        from faden_agent.supervisor.prefork.pools import fill_pool_holes

        fill_pool_holes()  # a child's small objects go to pools of its own (pools.py)
        gc.freeze()  # the holder too: no child's collection walks it
        steps.done("pools")
    log.info("prepared to fork in %.3f CPU s: %s", time.process_time(), steps.text())
    if marked:
        log.debug("marked %d objects immortal before forking", marked)
    elif marked == 0:
        from faden_agent.supervisor.prefork.immortal import unsupported_reason

        log.info("objects stay mortal under %s: each worker copies more of them (issue 16)", unsupported_reason())


class StepClock:
    """The CPU seconds of each step of the preparation, for the log line that says where the start's CPU went."""

    def __init__(self) -> None:
        self.last = time.process_time()
        self.steps: list[tuple[str, float]] = [("before", self.last)]

    def done(self, name: str) -> None:
        now = time.process_time()
        self.steps.append((name, now - self.last))
        self.last = now

    def text(self) -> str:
        return ", ".join(f"{name} {seconds:.3f}" for name, seconds in self.steps)


def share_tls_context(verify: bool | str) -> None:
    """The one client TLS context (tls.py), built here so every worker shares its parsed
    certificate store (4.4 MiB for the public bundle) instead of building its own."""
    from faden_agent.http.tls import client_context

    try:
        client_context(verify)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        log.warning("the TLS context was not built before forking (each worker tries again): %s", error_line(exc))


def skip_charset_guessers() -> None:
    """Makes requests, wherever it loads after this (in this process or a worker), load without
    a charset guesser (CHARSET_GUESSERS) and without the warning that it has none, and urllib3
    without its HTTP/2 package's import of importlib.metadata; a no-op once requests is loaded."""
    if "requests" in sys.modules:
        return
    skip_http2_metadata()
    for name in CHARSET_GUESSERS:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None: the import fails, requests falls back
    warnings.filterwarnings("ignore", message="Unable to find acceptable character detection")


def skip_http2_metadata() -> None:
    """urllib3's `http2/__init__.py` imports importlib.metadata (10 modules, 0.34 MiB of objects,
    3-4 ms) to check h2's version for an HTTP/2 opt-in the agent never makes; all urllib3 itself
    imports of that package is its `probe` module. So the package is entered without running
    its `__init__`: its submodules still load from its folder. A no-op once urllib3 is loaded."""
    if "urllib3" in sys.modules or HTTP2 in sys.modules:
        return
    found = importlib.util.find_spec("urllib3")  # a top-level spec: nothing of urllib3 runs
    if found is None or not found.submodule_search_locations:
        return
    folder = os.path.join(list(found.submodule_search_locations)[0], "http2")
    package = types.ModuleType(HTTP2, "urllib3's HTTP/2 package, entered without its __init__ (preload.py)")
    package.__spec__ = importlib.machinery.ModuleSpec(HTTP2, None, is_package=True)
    package.__spec__.submodule_search_locations = package.__path__ = [folder]
    sys.modules[HTTP2] = package
