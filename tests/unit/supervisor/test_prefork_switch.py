"""FADEN_NODE_AGENT_PREFORK: on, the supervisor's memory tricks run before it forks; off, none
does or is even loaded (no held heap chunks, no object made immortal), yet the workers'
modules and what they share are preloaded and the heap frozen. Each case in a fresh
interpreter, as the supervisor runs it (the tricks change the process for good)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from faden_agent.config import load_config
from faden_agent.supervisor.prefork import TRICKS, skipped_for_bench
from faden_agent.supervisor.prefork.immortal import IMMORTAL_REFCNT, unsupported_reason

REPO = Path(__file__).resolve().parents[3]
TARGET = "faden_agent.workers.logs.worker:LogsWorker"
PREPARE = """
import gc, json, sys
def probe(): pass
def frozen_garbage():  # cycles nothing reaches that the freeze kept for good (counted, not freed)
    gc.unfreeze()
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    return [type(o).__name__ for o in gc.garbage]
from faden_agent.supervisor.prefork import prepare_to_fork
from faden_agent.supervisor.prefork.preload import SHARED_MODULES
prepare_to_fork([sys.argv[2]], None, tricks=sys.argv[1] == "on")
heap = sys.modules.get("faden_agent.supervisor.prefork.heap")
print(json.dumps({"held": len(heap._held) if heap else 0, "refcount": sys.getrefcount(probe),
                  "tricks": sorted(m.rsplit(".", 1)[1] for m in sys.modules
                                   if m.startswith(("faden_agent.supervisor.prefork.", "faden_agent.common.cold"))),
                  "shared": all(m in sys.modules for m in SHARED_MODULES),
                  "preloaded": sys.argv[2].partition(":")[0] in sys.modules,
                  "frozen": gc.get_freeze_count(), "garbage": frozen_garbage()}))
"""


def prepare(mode: str, **env: str) -> dict:
    environ = {**os.environ, "PYTHONPATH": str(REPO), **env}
    out = subprocess.run(
        [sys.executable, "-c", PREPARE, mode, TARGET], capture_output=True, text=True, timeout=120, env=environ
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.skipif(unsupported_reason() is not None, reason="immortal objects need CPython 3.12/3.13")
def test_on_runs_the_tricks_and_off_runs_none():
    on, off = prepare("on"), prepare("off")
    assert on["held"] > 0 and on["refcount"] == IMMORTAL_REFCNT
    assert set(TRICKS) <= set(on["tricks"])
    assert off["held"] == 0 and off["refcount"] < 10 and not set(TRICKS) & set(off["tricks"]), off["tricks"]
    assert on["shared"] and off["shared"] and on["frozen"] > 0 and off["frozen"] > 0
    assert on["preloaded"] and off["preloaded"]


def test_the_start_freezes_no_cycle_for_good():
    """The warm-up's clients and threads are cycles; frozen, they would stay for the life of
    every process. Immortal objects never read as garbage, so the walk is left out here."""
    hooks = {"FADEN_TEST_HOOKS": "1", "FADEN_TEST_HOOK_PREFORK_SKIP": "immortal"}
    assert prepare("on", **hooks)["garbage"] == []


ARENAS = """
import re, sys, threading
from faden_agent.supervisor.prefork import prepare_to_fork
from faden_agent.supervisor.prefork.heap import _libc, malloc_info_xml
prepare_to_fork([sys.argv[2]], None, tricks=sys.argv[1] == "on")
held = []
def allocate():
    held.append(bytes(70_000))  # from glibc's malloc, in this thread
threads = [threading.Thread(target=allocate) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(len(re.findall(rb'<heap nr=', malloc_info_xml(_libc()))))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_threads_of_a_tree_with_the_tricks_share_one_malloc_arena():
    def arenas(mode: str) -> int:
        environ = {**os.environ, "PYTHONPATH": str(REPO)}
        out = subprocess.run(
            [sys.executable, "-c", ARENAS, mode, TARGET], capture_output=True, text=True, timeout=120, env=environ
        )
        assert out.returncode == 0, out.stderr
        return int(out.stdout.splitlines()[-1])

    assert arenas("on") == 1
    assert arenas("off") > 1  # each thread that allocated got one of its own


def test_a_bench_leaves_out_one_trick_only_under_test_hooks(monkeypatch):
    monkeypatch.setenv("FADEN_TEST_HOOK_PREFORK_SKIP", "heap,nonsense")
    monkeypatch.delenv("FADEN_TEST_HOOKS", raising=False)
    assert skipped_for_bench() == frozenset()
    monkeypatch.setenv("FADEN_TEST_HOOKS", "1")
    assert skipped_for_bench() == {"heap"} and "heap" in TRICKS


def test_the_switch_is_on_by_default_and_takes_on_off():
    assert load_config({}).prefork is True
    assert load_config({"FADEN_NODE_AGENT_PREFORK": "off"}).prefork is False
    with pytest.raises(ValueError, match="FADEN_NODE_AGENT_PREFORK"):
        load_config({"FADEN_NODE_AGENT_PREFORK": "sometimes"})
