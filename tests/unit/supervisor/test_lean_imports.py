"""What each process of the tree loads, and when (the idle tree's memory and the start's CPU):
the supervisor, as `faden-agent run` prepares it, holds the modules of the workers that start
with it and not the on-demand peer worker's, the metrics renderers, D-Bus where no bus is, or
what only a command needs; what two or more workers load is shared even when no worker module
is. Each case in a fresh interpreter, through the real entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from faden_agent.supervisor.prefork import preload
from faden_agent.workers import WORKERS

# The supervisor's real start up to its first fork (Supervisor.prepare: locks, runtime
# directory, prefork, sockets, metrics endpoint, logind), then each worker module imported
# in turn: what the supervisor held, and what each worker added.
PREPARED = """
import importlib, json, sys
from faden_agent.supervisor import arbiter
if sys.argv[1] == "no-targets":  # what each worker's module adds when none is preloaded
    real = arbiter.prepare_to_fork
    arbiter.prepare_to_fork = lambda targets, *rest: real([], *rest)
def prepared_only(self):
    self.prepare()
    held = {name for name, module in sys.modules.items() if module is not None}  # None: kept out on purpose
    added = {}
    for name, target in arbiter.WORKERS.items():
        before = set(sys.modules)
        importlib.import_module(target.partition(":")[0])
        added[name] = sorted(set(sys.modules) - before)
        for module in set(sys.modules) - before:  # the next worker starts from the supervisor's set again
            del sys.modules[module]
    print(json.dumps({"held": sorted(held), "added": added}))
    self.close_sockets()
    return 0
arbiter.Supervisor.run = prepared_only
from faden_agent.cli.launch import run_agent
sys.exit(run_agent())
"""


def prepare(root: Path, variant: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FADEN_NODE_AGENT_")}
    env.update(
        FADEN_NODE_AGENT_RUNTIME_DIR=str(root / "run"),
        FADEN_NODE_AGENT_STATE_PATH=str(root / "state" / "state.json"),
        FADEN_NODE_AGENT_METRICS_ADDR="127.0.0.1:0",
        DBUS_SYSTEM_BUS_ADDRESS=f"unix:path={root / 'no-bus'}",
    )
    out = subprocess.run(
        [sys.executable, "-c", PREPARED, variant], env=env, capture_output=True, text=True, timeout=120, cwd=Path.cwd()
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> dict:
    return prepare(tmp_path_factory.mktemp("lean"), "as-run")


@pytest.fixture(scope="module")
def unshared(tmp_path_factory) -> dict:
    return prepare(tmp_path_factory.mktemp("lean-unshared"), "no-targets")


def loaded(modules: list[str], *prefixes: str) -> list[str]:
    """Those of `prefixes`; not preload's stand-in for urllib3's HTTP/2 package (an empty module
    made ready for the SDK's requests, wherever they load)."""
    return [m for m in modules if m.startswith(prefixes) and m != preload.HTTP2]


def test_the_supervisor_holds_its_workers_modules_and_nothing_only_asked_for(prepared):
    held = prepared["held"]
    started = [target.partition(":")[0] for name, target in WORKERS.items() if name != "peer"]
    assert set(started) <= set(held), "the workers that start with the supervisor share their modules"
    assert loaded(held, "faden_agent.workers.peer", "faden_agent.transfers.server") == []  # on demand
    renderers = ("families", "exposition", "declared", "discovery", "health")
    assert loaded(held, *(f"faden_agent.supervisor.metrics.{name}" for name in renderers)) == []
    assert loaded(held, "charset_normalizer", "chardet", "typer", "click", "rich") == []
    assert loaded(held, "_sysconfigdata") == []  # the build's configuration: 0.6 MiB of objects
    assert loaded(held, "faden_agent.ipc.dbusconn", "faden_agent.supervisor.logind") == []  # no bus here
    assert loaded(held, "http.server", "socketserver", "faden_agent.transfers.fetch") == []
    assert loaded(held, "docker", "requests", "urllib3", "faden_agent.engine.sdk") == []  # the commands' SDK


def test_what_two_workers_load_the_supervisor_has_loaded_before(unshared):
    counts: dict[str, int] = {}
    for modules in unshared["added"].values():
        for module in modules:
            counts[module] = counts.get(module, 0) + 1
    shared = sorted(m for m, n in counts.items() if n >= 2)
    assert shared == [], f"load these before the fork (prefork/preload.py SHARED_MODULES): {shared}"


@pytest.mark.parametrize(
    ("worker", "occasional"),
    [
        # the Docker SDK, peer transfers, a pull's size check and prune: loaded by their first command
        (
            "executor",
            (
                "docker",
                "requests",
                "urllib3",
                "faden_agent.engine.sdk",
                "faden_agent.transfers.fetch",
                "faden_agent.transfers.server",
                "faden_agent.transfers.probe_client",
                "faden_agent.workers.executor.pull_size",
                "faden_agent.workers.executor.prune",
                "http.server",
            ),
        ),
        ("inventory", ("pynvml", "docker", "requests", "urllib3")),  # where the NVML library opens
        ("logs", ("docker", "requests", "urllib3")),
        ("stream", ("faden_agent.service.manager", "getpass")),  # the service's manager: the CLI's
    ],
)
def test_a_workers_idle_path_leaves_its_occasional_parts_unloaded(prepared, unshared, worker, occasional):
    assert loaded(prepared["held"], *occasional) == []
    assert loaded(unshared["added"][worker], *occasional) == []
