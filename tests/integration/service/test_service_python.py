"""The agent under the systemd unit's own Python settings (its Environment=PYTHON* lines, read
from the unit file: docstrings and asserts out, bytecode under the cache directory): it
enrolls, every worker runs and a command travels the real stream to the real engine and back;
its first start leaves level-2 bytecode in the cache and the next start reads it (rewrites
none); a cache it cannot write costs compiling, never the start."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import faden_agent
from tests.conftest import TEST_IMAGE
from tests.support.agentproc import AgentProcess
from tests.support.backendproc import BackendProcess, agent_env_for, backend  # noqa: F401 - fixture
from tests.support.executorproc import prefix  # noqa: F401 - fixture
from tests.support.serviceenv import as_service, service_python_env

pytestmark = pytest.mark.docker

PACKAGE = Path(faden_agent.__file__).resolve().parent
DOCSTRING_WORDS = b"The supervisor's work before it forks"  # prefork/__init__.py's docstring


def service_env(backend: BackendProcess, root: Path, cache_root: Path) -> dict[str, str]:
    root.mkdir()
    return as_service(agent_env_for(backend, root), cache_root)


def level_2_bytecode(cache_root: Path, module: str) -> Path:
    """Where the service's interpreter keeps `module`'s bytecode (a module of faden_agent)."""
    source = PACKAGE.joinpath(*module.split(".")[1:])
    prefix = Path(service_python_env(cache_root)["PYTHONPYCACHEPREFIX"])
    parent = source if source.is_dir() else source.parent
    name = "__init__" if source.is_dir() else source.name
    return prefix / parent.relative_to("/") / f"{name}.{sys.implementation.cache_tag}.opt-2.pyc"


def written(cache_root: Path) -> dict[Path, tuple[int, int]]:
    return {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in cache_root.rglob("*.pyc")}


def test_the_agent_runs_a_command_at_level_2_and_its_next_start_reads_the_cached_bytecode(
    backend,  # noqa: F811
    prefix,  # noqa: F811
    docker_client,
    tmp_path,
):
    cache_root = tmp_path / "cache"
    env = service_env(backend, tmp_path / "agent", cache_root)
    agent = AgentProcess(env, tmp_path / "agent.log").start()
    try:
        node = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])
        name = f"{prefix}-level2"
        run_id = backend.send_command(
            node["node_id"], "container.run", {"name": name, "image": TEST_IMAGE, "command": ["sleep", "300"]}
        )
        assert backend.wait_command(run_id)["state"] == "succeeded"
        assert docker_client.api.inspect_container(name)["State"]["Running"]
    finally:
        agent.stop()
    bytecode = level_2_bytecode(cache_root, "faden_agent.supervisor.prefork")
    assert bytecode.is_file(), sorted(str(p) for p in cache_root.rglob("*prefork*"))
    assert DOCSTRING_WORDS in (PACKAGE / "supervisor" / "prefork" / "__init__.py").read_bytes()
    assert DOCSTRING_WORDS not in bytecode.read_bytes()  # -OO: the docstring is not in the code
    first = written(cache_root)
    assert len(first) > 300  # the standard library, the dependencies and the agent

    again = AgentProcess(env, tmp_path / "again.log").start()
    try:
        backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"], heartbeats=node["heartbeats"] + 2)
    finally:
        again.stop()
    now = written(cache_root)
    assert {p: now[p] for p in first} == first  # read, not compiled and written again


def test_a_cache_directory_that_cannot_be_written_still_starts_the_agent(backend, tmp_path):  # noqa: F811
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the cache directory would go\n")
    env = service_env(backend, tmp_path / "agent", blocked)
    agent = AgentProcess(env, tmp_path / "agent.log").start()
    try:
        backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"], heartbeats=2)
    finally:
        agent.stop()
    assert blocked.read_text() == "a file where the cache directory would go\n"
    assert agent.proc is not None and agent.proc.returncode == 0, agent.log_text()[-2000:]
