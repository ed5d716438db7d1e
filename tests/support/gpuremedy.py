"""A real agent on tests/nvml's C GPUs and stand-in nvidia-smi and dcgmi, enrolled at the real
reference backend, for the gpu.check and gpu.reset tests: always on a Docker engine of the test's
own (the `own_engine` fixture), so every container that uses its GPUs is the test's; send a command
and read its outcome and progress, run the host CLI, tie a container to GPUs (NVIDIA_VISIBLE_DEVICES,
and its process in NVML's list) as the NVIDIA runtime and a CUDA program would."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from faden_agent import protocol
from tests.conftest import TEST_IMAGE
from tests.nvml.state import GpuState
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import BackendProcess, agent_env_for
from tests.support.privateengine import PrivateEngine


def start_agent(
    backend: BackendProcess, root: Path, gpus: GpuState, engine: PrivateEngine, dcgm: bool = False, **settings: Any
) -> tuple[AgentProcess, dict[str, str], str]:
    """The agent (inventory rounds every second) on `engine`, its environment and node id, once its GPUs are in."""
    root.mkdir(parents=True, exist_ok=True)
    settings = {"inventory_interval_sec": 1, "inventory_usage_sec": 1, **settings, "docker_host": engine.host}
    env = agent_env_for(backend, root, **settings)
    env.update(gpus.env(dcgm=dcgm))
    agent = AgentProcess(env, root / "agent.log").start()
    node_id = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])["node_id"]
    wait_for(lambda: len(devices(backend, node_id)) == len(gpus.gpus), 30, what="the GPUs in the inventory")
    return agent, env, node_id


def gpu_section(backend: BackendProcess, node_id: str) -> dict[str, Any]:
    return (backend.inventory(node_id).get("inventory") or {}).get("gpu") or {}


def devices(backend: BackendProcess, node_id: str) -> list[dict[str, Any]]:
    return gpu_section(backend, node_id).get("devices") or []


def health(backend: BackendProcess, node_id: str, index: int) -> dict[str, Any]:
    found = [d for d in devices(backend, node_id) if d["index"] == index]
    return (found[0].get("health") or {}) if found else {}


def run(
    backend: BackendProcess, node_id: str, kind: str, spec: dict[str, Any], timeout_s: float = 60
) -> dict[str, Any]:
    """Sends the command and waits for its end: the command with its timeline."""
    command_id = backend.send_command(node_id, kind, spec)
    return backend.wait_command(command_id, timeout_s=timeout_s)


def outcome(command: dict[str, Any]) -> dict[str, Any]:
    return next(r for r in command["timeline"] if r["state"] in protocol.TERMINAL_STATES)


def steps(command: dict[str, Any], phase: str | None = None) -> list[dict[str, Any]]:
    found = [r for r in command["timeline"] if r["state"] == protocol.PROGRESS]
    return [r for r in found if phase is None or r.get("phase") == phase]


def cli(env: dict[str, str], *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "faden_agent", *args], env=env, capture_output=True, text=True, timeout=timeout_s
    )


def on_gpus(docker_client: Any, image: str, name: str, gpus: str, command: str, **options: Any) -> Any:
    """A managed container given `gpus` as the NVIDIA runtime sees it (NVIDIA_VISIBLE_DEVICES)."""
    return docker_client.containers.run(
        image,
        ["sh", "-c", command],
        name=name,
        labels={protocol.LABEL_MANAGED: "true", **options.pop("labels", {})},
        environment={"NVIDIA_VISIBLE_DEVICES": gpus, **options.pop("environment", {})},
        detach=True,
        **options,
    )


def computes_on(gpus: GpuState, index: int, pid: int) -> None:
    """NVML lists `pid` as a compute process on GPU `index` (a CUDA context there)."""
    gpus.gpus[index]["compute"] = {"count": 1, "0": {"pid": pid, "used": 1 << 30}}
    gpus.write()


@pytest.fixture
def own_engine() -> Iterator[tuple[PrivateEngine, Any]]:
    """(engine, a client of it): a dockerd of the test's own holding TEST_IMAGE. gpu.check and
    gpu.reset count every running container of their engine given a GPU as a user of it; on the
    shared engine, other tests' containers given GPUs by index or `all` would use this test's GPUs
    too (every GpuState numbers its GPUs from 0, with the same uuids). Under a short path (a Unix
    socket has 108 bytes at most)."""
    root = Path(tempfile.mkdtemp(prefix="fx-gpu-"))
    try:
        with PrivateEngine(root / "engine", TEST_IMAGE) as engine:
            client = docker.DockerClient(base_url=engine.host, timeout=60)
            try:
                yield engine, client
            finally:
                client.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
