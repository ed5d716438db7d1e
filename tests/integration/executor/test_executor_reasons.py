"""The failures a newcomer meets first end with their own reason and what to do,
each made for real: a registry name that does not resolve, a tag the test registry lacks,
and an agent whose user may not use the Docker socket."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support.agentproc import AgentProcess, agent_env
from tests.support.executorproc import EXECUTOR_ONLY, ExecutorClient, executor_factory, prefix  # noqa: F401

pytestmark = pytest.mark.docker

UNPRIVILEGED = 65534  # nobody: not in the docker group


def test_unresolvable_registry_is_registry_unreachable(executor_factory, prefix):
    agent, ex = executor_factory()
    image = "no-such-registry.invalid/faden/busybox:1"  # .invalid never resolves (RFC 2606)
    done = ex.run(f"{prefix}-pull", "image.pull", {"image": image})
    assert (done["state"], done["reason"]) == ("failed", "registry_unreachable"), done
    assert "cannot reach the registry no-such-registry.invalid" in done["message"], done
    assert "no such host" in done["message"], done  # the engine's own words stay
    run = ex.run(f"{prefix}-run", "container.run", {"name": f"{prefix}-c", "image": image})
    assert (run["state"], run["reason"]) == ("failed", "registry_unreachable"), run


def test_missing_tag_is_image_not_found_with_what_to_do(executor_factory, prefix, registry):
    agent, ex = executor_factory()
    image = f"{registry}/faden/busybox:no-such-tag"
    done = ex.run(f"{prefix}-pull", "image.pull", {"image": image})
    assert (done["state"], done["reason"]) == ("failed", "image_not_found"), done
    assert f"no such image or tag in registry {registry}" in done["message"], done
    assert "check the repository name and tag" in done["message"], done


@pytest.fixture
def nobody_dir():
    """State and runtime directories the unprivileged agent may write (tmp_path is root's 0700)."""
    path = Path(tempfile.mkdtemp(prefix="faden-nobody-", dir="/tmp"))
    os.chown(path, UNPRIVILEGED, UNPRIVILEGED)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_no_permission_on_the_docker_socket_is_docker_permission(nobody_dir, docker_client):
    socket = "/var/run/docker.sock"
    if os.stat(socket).st_mode & 0o002:
        pytest.fail(f"{socket} is world-writable here: no user lacks access to it")
    # The interpreter lives under root's 0700 home here: CAP_DAC_READ_SEARCH lets the
    # unprivileged agent read it, and grants no write, so connecting to the socket is refused.
    setpriv = [
        "setpriv",
        f"--reuid={UNPRIVILEGED}",
        f"--regid={UNPRIVILEGED}",
        "--clear-groups",
        "--inh-caps=+dac_read_search",
        "--ambient-caps=+dac_read_search",
    ]
    env = agent_env(nobody_dir, docker_host=f"unix://{socket}", agent_id="fx-nobody")
    env["HOME"] = str(nobody_dir)
    agent = AgentProcess(env, nobody_dir / "agent.log", argv=setpriv + EXECUTOR_ONLY)
    with agent:
        assert agent.workers()["executor"]["pid"]
        ex = ExecutorClient(agent)
        done = ex.run("fx-perm-pull", "image.pull", {"image": "faden-test/busybox:1"})
        assert (done["state"], done["reason"]) == ("failed", "docker_permission"), done
        assert "may not use the Docker socket" in done["message"] and "docker group" in done["message"], done
        assert "Permission denied" in done["message"], done
