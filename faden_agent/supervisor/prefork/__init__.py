"""The supervisor's work before it forks; prepare_to_fork is the one entry point.

Always: the modules of the workers that start with it and what they share imported
(preload.py), the heap frozen (gc.freeze). With PREFORK on (the default) also the memory
tricks in TRICKS, one module each; off, none of them runs or is loaded (no ctypes writes).
"""

from __future__ import annotations

from faden_agent.common import testhooks
from faden_agent.supervisor.prefork import preload

TRICKS = ("arenas", "warmup", "versions", "immortal", "heap", "coldpages", "pools")


def prepare_to_fork(targets: list[str], tls_verify: bool | str | None, tricks: bool) -> None:
    """Preload `targets` (the entry points of the workers that start now) and what the workers
    share and, when `tricks`, run every trick."""
    preload.preload(targets, tls_verify, skip=frozenset(TRICKS) if not tricks else skipped_for_bench())


def skipped_for_bench() -> frozenset[str]:
    """PREFORK_SKIP=name,name (test hook): the tricks a bench leaves out to measure each one's share."""
    names = (testhooks.hook("prefork_skip") or "").split(",")
    return frozenset(name for name in names if name in TRICKS)
