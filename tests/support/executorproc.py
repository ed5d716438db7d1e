"""Test helpers for the executor: run the real supervisor with only the executor worker
(or the whole agent), hand it commands over its real REQ socket exactly as the stream
worker does, and read its timeline/event records from the real outbox file."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from faden_agent import protocol
from faden_agent.backend.outbox import Outbox
from faden_agent.ipc import request
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.sampleworkers import supervisor_argv

EXECUTOR_ONLY = supervisor_argv({"executor": "faden_agent.workers.executor.worker:ExecutorWorker"})


def unique_prefix() -> str:
    return f"fx-{uuid.uuid4().hex[:8]}"


class ExecutorClient:
    """Talks to one agent's executor and reads what it reported."""

    def __init__(self, agent: AgentProcess):
        self.agent = agent
        self.state_dir = Path(agent.env["FADEN_NODE_AGENT_STATE_PATH"]).parent
        self._seq = 0

    def send(
        self, command_id: str, kind: str, spec: Any, deadline: float | None = None, timeout_s: float = 30.0
    ) -> dict[str, Any]:
        self._seq += 1
        body = {"id": command_id, "seq": self._seq, "kind": kind, "spec": spec, "deadline": deadline}
        reply = request(self.agent.endpoints.executor, "command", body, timeout_s=timeout_s)
        assert reply is not None, f"the executor did not ack {command_id} within {timeout_s}s"
        assert reply.type == "ack", reply
        return reply.body

    def records(self, kind: str | None = None) -> list[dict[str, Any]]:
        outbox = Outbox(self.state_dir)
        try:
            rows = outbox.pending(1_000_000)
        finally:
            outbox.close()
        return [r for r in rows if kind is None or r["kind"] == kind]

    def timeline(self, command_id: str) -> list[dict[str, Any]]:
        return [r for r in self.records(protocol.TIMELINE) if r["data"]["command_id"] == command_id]

    def states(self, command_id: str) -> list[str]:
        return [r["data"]["state"] for r in self.timeline(command_id)]

    def terminal(self, command_id: str) -> dict[str, Any] | None:
        for record in self.timeline(command_id):
            if record["data"]["state"] in protocol.TERMINAL_STATES:
                return record["data"]
        return None

    def wait_terminal(self, command_id: str, timeout_s: float = 30.0) -> dict[str, Any]:
        return wait_for(
            lambda: self.terminal(command_id),
            timeout_s,
            interval_s=0.05,
            what=f"a terminal timeline state of {command_id}",
        )

    def run(self, command_id: str, kind: str, spec: Any, timeout_s: float = 30.0, **kw: Any) -> dict[str, Any]:
        ack = self.send(command_id, kind, spec, **kw)
        assert ack["accepted"], ack
        return self.wait_terminal(command_id, timeout_s)

    def events(self, event_type: str | None = None) -> list[dict[str, Any]]:
        return [
            r["data"] for r in self.records(protocol.EVENT) if event_type is None or r["data"].get("type") == event_type
        ]


# --- a big image in the local registry, so a pull takes a few seconds

BIG_IMAGE_REPO = "faden/fx-big"
BIG_LAYERS = 4
BIG_LAYER_BYTES = 128 * 1024 * 1024
_LOCK_PATH = "/tmp/faden-test-big-image.lock"


def ensure_big_image(docker_client: Any, registry: str) -> str:
    """Build (once per registry) an image of a few layers of random data and push it."""
    return ensure_random_image(docker_client, registry, BIG_IMAGE_REPO, "2", BIG_LAYERS, BIG_LAYER_BYTES)


def ensure_random_image(docker_client: Any, registry: str, repo: str, tag: str, layers: int, layer_bytes: int) -> str:
    """Build (once per registry) `repo:tag` of `layers` layers of random data and push it;
    the pushed tag stays in the shared engine (the caller drops it if it wants)."""
    import io
    import os
    import tarfile

    import requests

    ref = f"{registry}/{repo}:{tag}"
    manifest = requests.head(
        f"http://{registry}/v2/{repo}/manifests/{tag}",
        timeout=5,
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    if manifest.status_code == 200:
        return ref
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        dockerfile = "FROM faden-test/busybox:1\n" + "".join(f"COPY blob{i} /blob{i}\n" for i in range(layers))
        for name, data in [("Dockerfile", dockerfile.encode())] + [
            (f"blob{i}", os.urandom(layer_bytes)) for i in range(layers)
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    docker_client.images.build(fileobj=context, custom_context=True, tag=ref, rm=True)
    for line in docker_client.images.push(ref, stream=True, decode=True):
        assert "error" not in line, line
    return ref


class BigImage:
    """Holds an exclusive lock (across xdist workers) while a test pulls the big image, and
    makes sure no local copy exists before and after, so the pull really downloads."""

    def __init__(self, docker_client: Any, registry: str):
        import fcntl

        self.docker = docker_client
        self._lock = open(_LOCK_PATH, "w")
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        self.ref = ensure_big_image(docker_client, registry)
        self.drop_local()

    def drop_local(self) -> None:
        import docker

        try:
            self.docker.images.remove(self.ref, force=True)
        except docker.errors.ImageNotFound:
            pass

    def release(self) -> None:
        self.drop_local()
        self._lock.close()


def remove_containers(docker_client: Any, prefix: str) -> None:
    for container in docker_client.containers.list(all=True, filters={"name": prefix}):
        container.remove(force=True)


# --- fixtures (import them into a test module)

import pytest  # noqa: E402

from tests.support.agentproc import agent_env  # noqa: E402


@pytest.fixture
def prefix(docker_client):
    """A unique container-name prefix; every container with it is removed after the test."""
    value = unique_prefix()
    yield value
    remove_containers(docker_client, value)


@pytest.fixture
def executor_factory(tmp_path, docker_client):
    """Start the real supervisor with only the executor worker; returns (agent, client)."""
    started: list[AgentProcess] = []

    def make(full_agent: bool = False, **overrides: Any) -> tuple[AgentProcess, ExecutorClient]:
        settings = {"docker_timeout_sec": 5, "agent_id": "fx-agent", **overrides}
        env = agent_env(tmp_path, **settings)
        argv = None if full_agent else EXECUTOR_ONLY
        agent = AgentProcess(env, tmp_path / f"agent-{len(started)}.log", argv=argv)
        started.append(agent)
        agent.start()
        client = ExecutorClient(agent)
        return agent, client

    yield make
    for agent in started:
        agent.stop()
        agent.kill()


@pytest.fixture
def big_image(docker_client, registry):
    image = BigImage(docker_client, registry)
    yield image.ref
    image.release()


def executor_pid(agent: AgentProcess) -> int:
    return agent.workers()["executor"]["pid"]
