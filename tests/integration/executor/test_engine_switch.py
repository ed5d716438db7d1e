"""An engine upgraded (or downgraded) underneath a running agent: the agent's executor spoke
API 1.41 with a Docker 20.10 on a socket; that engine stops and a Docker 29 (minimum 1.44)
starts on the same socket, or the other way round. The agent's next command succeeds: the
engine's "too old/too new" refusal makes it negotiate again within that one command."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from faden_agent.engine.sdk import engine_version, make_client
from faden_agent.engine.versions import CLIENT_MAX_API
from tests.conftest import TEST_IMAGE, require
from tests.support.engine29 import Engine29, missing_piece
from tests.support.executorproc import executor_factory, prefix  # noqa: F401
from tests.support.privateengine import PrivateEngine

pytestmark = pytest.mark.docker


def run_one(ex, command_id: str, name: str) -> dict:
    spec = {"name": name, "image": TEST_IMAGE, "command": ["sleep", "300"], "network_mode": "none"}
    return ex.run(command_id, "container.run", spec, timeout_s=60)


def engines(root: Path, socket: Path, first: str):
    def twenty() -> PrivateEngine:
        engine = PrivateEngine(root / "e20", TEST_IMAGE)
        engine.socket, engine.host = socket, f"unix://{socket}"
        return engine

    def twentynine() -> Engine29:
        return Engine29(root / "e29", socket=socket)

    return (twenty, twentynine) if first == "20.10" else (twentynine, twenty)


@pytest.mark.parametrize("first", ["20.10", "29"])
def test_the_next_command_after_an_engine_switch_succeeds(executor_factory, prefix, first):
    why = missing_piece()
    if why:
        require("Docker Engine 29", why)
    root = Path(tempfile.mkdtemp(prefix="fxsw-", dir="/tmp"))  # a short socket path
    socket = root / "docker.sock"
    before, after = engines(root, socket, first)
    client = make_client(f"unix://{socket}", timeout_s=30)  # one client, as a worker's thread holds it
    with before():
        agent, ex = executor_factory(docker_host=f"unix://{socket}")
        done = run_one(ex, f"{prefix}-before", f"{prefix}-before")
        assert done["state"] == "succeeded", done
        assert client.containers.get(f"{prefix}-before").status == "running"
        was = engine_version(client)
    with after():
        done = run_one(ex, f"{prefix}-after", f"{prefix}-after")
        assert done["state"] == "succeeded", done
        assert ex.states(f"{prefix}-after") == ["received", "started", "succeeded"]
        assert client.containers.get(f"{prefix}-after").status == "running"  # refused once, negotiated, sent again
        now = engine_version(client)
    assert was and now and {was.version[:2], now.version[:2]} == {"20", "29"}
    assert {was.api_in_use, now.api_in_use} == {"1.41", CLIENT_MAX_API}
