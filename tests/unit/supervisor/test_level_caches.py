"""Each logger's level cache is filled before the fork (warmup.fill_level_caches) and a worker's
configure_logging keeps it (setting a level the logger has already would empty every cache):
a forked child asking 2,000 loggers whether a level is enabled then writes none of their
caches. Measured in a real fork by the child's Private_Dirty, the objects immortal in both
runs (immortal.py), as the supervisor leaves them; and the behaviour either way."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

from faden_agent.common.logsetup import configure_logging
from faden_agent.supervisor.prefork.warmup import fill_level_caches
from tests.conftest import require
from tests.unit.supervisor.test_immortal import FORK, interpreter_with_immortal_objects

REPO = Path(__file__).resolve().parents[3]
LEVELS = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)
FORKED = (
    """
import gc, logging, os, re, sys
from faden_agent.common.logsetup import configure_logging
from faden_agent.supervisor.prefork.immortal import immortalize_heap
from faden_agent.supervisor.prefork.warmup import fill_level_caches
configure_logging("info", "faden-agent")
loggers = [logging.getLogger(f"faden_agent.test.l{i}") for i in range(2000)]
for logger in loggers:
    logger.isEnabledFor(logging.INFO)  # as the supervisor's own lines fill some
if sys.argv[1] == "filled":
    fill_level_caches()
immortalize_heap()
gc.freeze()
"""
    + FORK
    + """if pid == 0:
    before = private_dirty_kib()
    configure_logging("info", "faden-agent/worker")
    enabled = sum(logger.isEnabledFor(level) for logger in loggers for level in (10, 20, 30, 40, 50))
    copied = private_dirty_kib() - before
    os.write(write, f"{copied} {enabled}".encode())
    os._exit(0)
os.waitpid(pid, 0)
print(os.read(read, 200).decode())
"""
)


def forked(python: str, mode: str) -> int:
    """KiB the child copied."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([python, "-c", FORKED, mode], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    copied_kib, enabled = map(int, out.stdout.split())
    assert enabled == 2000 * 4  # INFO and up: the caches answer right
    return copied_kib


def test_a_child_reads_the_filled_caches_without_copying_them():
    python = interpreter_with_immortal_objects()
    if python is None:
        require("a CPython 3.12 or 3.13", "none was found (PATH, pyenv)")
    plain, filled = forked(python, "plain"), forked(python, "filled")
    # 2,000 caches written: their dicts' pages (the rest, about 0.3 MiB in both, is the child's
    # new handler and the bytecode its first lines rewrite)
    assert plain - filled > 500, (filled, plain)


def test_the_same_level_keeps_the_caches_and_another_empties_them():
    logger = logging.getLogger("faden_agent.test.level_caches")
    root = logging.getLogger()
    saved = root.level, list(root.handlers)
    try:
        configure_logging("info", "faden-agent")
        assert fill_level_caches() >= 2
        assert set(logger._cache) == set(LEVELS)  # type: ignore[attr-defined]
        configure_logging("info", "faden-agent/worker")
        assert set(logger._cache) == set(LEVELS)  # type: ignore[attr-defined]
        configure_logging("debug", "faden-agent/worker")
        assert logger._cache == {} and logger.isEnabledFor(logging.DEBUG)  # type: ignore[attr-defined]
        assert logging.getLogger("urllib3").level == logging.INFO  # still kept quiet
    finally:
        root.setLevel(saved[0])
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[1]:
            root.addHandler(handler)
