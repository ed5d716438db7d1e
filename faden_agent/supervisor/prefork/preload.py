"""What the supervisor imports before it forks, so the workers share it instead of each importing it.

Every worker's module plus SHARED_MODULES; importing starts nothing (no thread, socket, NVML
or Docker call) and pynvml stays out. Then the tricks not skipped (prefork.TRICKS) and
gc.freeze. Why each trick, and what it saves: docs/design-notes.md.
"""

from __future__ import annotations

import gc
import importlib
import logging
import sys
import warnings

from faden_agent.common.errorline import error_line
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
    # before freeze: frozen objects are no longer listed
    marked = immortalize_heap() if "immortal" not in skip else None
    gc.freeze()
    if "heap" not in skip:
        release_free_heap()
        fill_heap_holes()  # a child's first mallocs go to fresh pages (heap.py)
    if "coldpages" not in skip:
        page_out_cold_libraries()  # start-up's library pages back to the kernel (coldpages.py)
    if marked:
        log.debug("marked %d objects immortal before forking", marked)
    elif marked == 0:
        log.info("objects stay mortal under %s: each worker copies more of them (issue 16)", unsupported_reason())


def share_tls_context(verify: bool | str) -> None:
    """The one client TLS context (tls.py), built here so every worker shares its parsed
    certificate store (4.4 MiB for the public bundle) instead of building its own."""
    from faden_agent.http.tls import client_context  # after skip_charset_guessers: it imports requests

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
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None: the import fails, requests falls back
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Unable to find acceptable character detection")
        import requests  # noqa: F401 - loaded here, under the filter, for every worker
