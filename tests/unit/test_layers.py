"""The layers between the rooms, read from the code (ast, every import at any depth): a worker
imports no other worker; the shared rooms (reports/, ipc/, protocol, config) import no worker
and not the supervisor; the reference backend (devbackend/) imports no worker."""

from __future__ import annotations

import ast
from pathlib import Path

import faden_agent

ROOT = Path(faden_agent.__file__).parent
WORKERS = sorted(d.name for d in (ROOT / "workers").iterdir() if (d / "__init__.py").is_file())
SHARED = ("faden_agent.reports", "faden_agent.ipc", "faden_agent.protocol", "faden_agent.config")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update([node.module] + [f"{node.module}.{alias.name}" for alias in node.names])
    return found


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def worker_of(name: str) -> str | None:
    return next((w for w in WORKERS if within(name, f"faden_agent.workers.{w}")), None)


def broken_rules(modules: dict[str, set[str]]) -> list[str]:
    broken = []
    for module, imported in sorted(modules.items()):
        own = worker_of(module)
        for name in sorted(imported):
            other = worker_of(name)
            if own and other and other != own:
                broken.append(f"{module} (worker {own}) imports worker {other}: {name}")
            shared = any(within(module, room) for room in SHARED)
            if shared and (other or within(name, "faden_agent.supervisor")):
                broken.append(f"{module} (shared) imports {name}")
            if within(module, "faden_agent.devbackend") and other:
                broken.append(f"{module} (reference backend) imports worker {other}: {name}")
    return broken


def test_the_layers_hold():
    assert {"stream", "executor", "inventory", "logs", "peer"} <= set(WORKERS)
    modules = {module_name(path): imports(path) for path in ROOT.rglob("*.py")}
    assert broken_rules(modules) == []


def test_the_rules_catch_each_kind_of_breach():
    breaches = {
        "faden_agent.workers.executor.commands.image": {"faden_agent.workers.peer.worker"},
        "faden_agent.reports.sender": {"faden_agent.workers.stream.link"},
        "faden_agent.ipc.control": {"faden_agent.supervisor.arbiter"},
        "faden_agent.protocol": {"faden_agent.workers.inventory.record"},
        "faden_agent.config": {"faden_agent.supervisor"},
        "faden_agent.devbackend.store": {"faden_agent.workers.inventory.record"},
    }
    assert len(broken_rules(breaches)) == len(breaches)
    fine = {
        "faden_agent.workers.stream.uplink": {"faden_agent.workers.stream.link", "faden_agent.workers.base"},
        "faden_agent.supervisor.arbiter": {"faden_agent.workers.base", "faden_agent.ipc"},
    }
    assert broken_rules(fine) == []
