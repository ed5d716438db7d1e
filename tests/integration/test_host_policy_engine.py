"""The host policy in a real executor on the real engine: the Docker socket mount is
refused (`rejected` / `policy_denied`, no container made), a Ray/vLLM-shaped container runs
with what it asked for, and a bad policy file stops the agent with one line naming it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.agentproc import agent_env
from tests.conftest import TEST_IMAGE
from tests.executorproc import executor_factory, prefix  # noqa: F401

pytestmark = pytest.mark.docker


def test_the_docker_socket_is_refused_and_a_ray_vllm_container_runs(executor_factory, prefix, docker_client, tmp_path):
    agent, ex = executor_factory()
    refused = ex.run(
        "pol-sock",
        "container.run",
        {
            "name": f"{prefix}-sock",
            "image": TEST_IMAGE,
            "command": ["sleep", "60"],
            "mounts": [{"source": "/var/run/docker.sock", "target": "/var/run/docker.sock"}],
        },
    )
    assert (refused["state"], refused["reason"]) == ("rejected", "policy_denied"), refused
    assert "rule protected_paths" in refused["message"] and "docker.sock" in refused["message"]
    assert not docker_client.containers.list(all=True, filters={"name": f"{prefix}-sock"})

    cache = tmp_path / "models"
    cache.mkdir()
    done = ex.run(
        "pol-ray",
        "container.run",
        {
            "name": f"{prefix}-ray",
            "image": TEST_IMAGE,
            "command": ["sleep", "60"],
            "network_mode": "host",
            "ipc_mode": "host",
            "shm_size": "256m",
            "cap_add": ["IPC_LOCK", "SYS_NICE"],
            "mounts": [{"source": str(cache), "target": "/root/.cache/huggingface"}],
        },
    )
    assert done["state"] == "succeeded", done
    host_config = docker_client.api.inspect_container(f"{prefix}-ray")["HostConfig"]
    assert host_config["NetworkMode"] == "host" and host_config["IpcMode"] == "host"
    assert sorted(host_config["CapAdd"]) == ["IPC_LOCK", "SYS_NICE"] and not host_config["Privileged"]


def test_a_bad_policy_file_stops_the_agent_with_one_line_naming_it(tmp_path):
    policy = tmp_path / "policy.json"
    policy.write_text('{"privileged": "sometimes"}')
    env = agent_env(tmp_path, policy_file=policy)
    done = subprocess.run(
        [sys.executable, "-m", "faden_agent", "run"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert lines == [
        f"faden-agent: FADEN_NODE_AGENT_POLICY_FILE={policy}: privileged must be true or false, got 'sometimes'"
    ]
