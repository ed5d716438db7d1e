"""API versions no real engine here speaks, and an engine upgraded while the agent stays
connected: a gate in front of the shared engine answers for a range of its own
(tests/support/versiongate.py), and changes it mid-run."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest

from faden_agent.engine.errors import EngineTooOld
from faden_agent.engine.sdk import engine_version, make_client
from faden_agent.engine.versions import CLIENT_MAX_API, FAILURE_KEPT_S
from tests.conftest import TEST_IMAGE
from tests.support.executorproc import executor_factory, prefix  # noqa: F401
from tests.support.versiongate import VersionGate

pytestmark = pytest.mark.docker

SHARED_ENGINE = "/var/run/docker.sock"


@pytest.fixture
def gate(host_docker_client):
    folder = Path(tempfile.mkdtemp(prefix="fxgate-", dir="/tmp"))  # a short socket path
    version = host_docker_client.version()["ApiVersion"]  # 1.41: the shared 20.10
    gate = VersionGate(folder / "gate.sock", SHARED_ENGINE, version, "1.24", "1.43")
    yield gate
    gate.close()


def test_one_client_meets_a_refusal_mid_run_and_sends_that_request_again(gate):
    client = make_client(gate.host, timeout_s=30)
    # sparse: one request, no inspect of a container another test may remove meanwhile
    client.containers.list(limit=1, sparse=True)
    assert engine_version(client).api_in_use == "1.43"  # a version in between: Docker 24's
    gate.speak("1.44", "1.52")  # upgraded underneath, the connection kept
    client.containers.list(limit=1, sparse=True)  # refused once, negotiated, sent again: no error here
    assert gate.refused == ["1.43"]
    assert engine_version(client).api_in_use == CLIENT_MAX_API
    gate.speak("1.24", "1.40")  # and down again
    client.containers.list(limit=1, sparse=True)
    assert gate.refused == ["1.43", CLIENT_MAX_API] and engine_version(client).api_in_use == "1.40"
    gate.speak("1.24", "1.39")  # no device requests: nothing to negotiate
    with pytest.raises(EngineTooOld, match=r"API 1\.39 at most.*upgrade the engine"):
        client.containers.list(limit=1, sparse=True)


def test_the_agent_runs_its_next_command_after_the_engine_changed_its_range(executor_factory, prefix, gate):
    agent, ex = executor_factory(docker_host=gate.host)
    spec = {
        "image": TEST_IMAGE,
        "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 300 & wait"],
        "network_mode": "none",
    }
    first = ex.run(f"{prefix}-a", "container.run", {**spec, "name": f"{prefix}-a"}, timeout_s=60)
    assert first["state"] == "succeeded", first
    assert {asked for asked, _ in gate.seen if asked} == {"1.43"}
    gate.speak("1.44", "1.52")
    second = ex.run(f"{prefix}-b", "container.run", {**spec, "name": f"{prefix}-b"}, timeout_s=60)
    assert second["state"] == "succeeded", second
    assert set(gate.refused) <= {"1.43"}  # at most once per client that spoke 1.43
    gate.speak("1.24", "1.39")
    third = ex.run(f"{prefix}-c", "container.run", {**spec, "name": f"{prefix}-c"}, timeout_s=60)
    assert (third["state"], third["reason"]) == ("failed", "docker_unavailable"), third
    assert "upgrade the engine" in third["message"]
    gate.speak("1.24", "1.41")  # back to what 20.10 speaks: the command after the refusal's
    time.sleep(FAILURE_KEPT_S)  # short keep negotiates it
    for name in ("a", "b"):
        assert ex.run(f"{prefix}-rm-{name}", "container.remove", {"name": f"{prefix}-{name}"})["state"] == "succeeded"
