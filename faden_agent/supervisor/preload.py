"""What the supervisor imports before it forks, so the workers share it instead of each
importing its own copy (issue 16: PSS of the whole tree, and a restarted worker that does
not spend its first 100 ms importing).

Every worker's module (and so what it imports at module level: requests, urllib3, ssl,
the docker SDK, ...) plus the docker SDK that the log worker imports lazily. Importing
starts nothing (no thread, socket, NVML or Docker call); pynvml stays out: only the
inventory worker's GPU probe loads it, and only on a machine with GPUs.

After the imports the supervisor freezes them (gc.freeze): its collector then never
writes to the shared objects' headers, which would copy their pages into the supervisor;
each child freezes what it inherits first thing (arbiter.spawn_worker).
"""

from __future__ import annotations

import gc
import importlib
import logging

log = logging.getLogger(__name__)

SHARED_MODULES = ("docker",)  # imported lazily by some workers, used by three of four


def preload(targets: list[str]) -> None:
    """Imports each worker target's module and SHARED_MODULES, then freezes the heap. A
    module that fails to import is left to its worker, which reports the failure."""
    for module in [t.partition(":")[0] for t in targets] + list(SHARED_MODULES):
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - the worker's own import reports it properly
            log.warning("preloading %s failed (its worker imports it again): %s", module, exc)
    gc.collect()
    gc.freeze()
