"""The host policy in a real executor on the real engine: only allowed bind sources
(every hostile host path ends `policy_denied`, no container made), a Ray/vLLM-shaped
container runs, a source re-pointed by a tenant before Docker mounts it is never mounted,
and a bad policy file stops the agent with one line naming it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TEST_IMAGE
from tests.support.agentproc import agent_env, wait_for
from tests.support.executorproc import executor_factory, prefix  # noqa: F401
from tests.support.hostpaths import HOST_PATHS

pytestmark = pytest.mark.docker


def test_host_paths_are_refused_and_a_ray_vllm_container_runs(executor_factory, prefix, docker_client):
    agent, ex = executor_factory()
    for i, source in enumerate(("/var/run/docker.sock", *HOST_PATHS)):
        ex.send(
            f"pol-{i}",
            "container.run",
            {
                "name": f"{prefix}-host-{i}",
                "image": TEST_IMAGE,
                "command": ["sleep", "60"],
                "mounts": [{"source": source, "target": "/host"}],
            },
        )
    for i, source in enumerate(("/var/run/docker.sock", *HOST_PATHS)):
        refused = ex.wait_terminal(f"pol-{i}")
        assert (refused["state"], refused["reason"]) == ("rejected", "policy_denied"), (source, refused)
        assert "rule allow_bind" in refused["message"] and repr(source) in refused["message"], refused
    assert not docker_client.containers.list(all=True, filters={"name": f"{prefix}-host-"})

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
            "ray": True,  # the agent's Ray log directory
            "mounts": [{"source": "/dev/shm", "target": "/dev/shm"}],
        },
    )
    assert done["state"] == "succeeded", done
    host_config = docker_client.api.inspect_container(f"{prefix}-ray")["HostConfig"]
    assert host_config["NetworkMode"] == "host" and host_config["IpcMode"] == "host"
    assert sorted(host_config["CapAdd"]) == ["IPC_LOCK", "SYS_NICE"] and not host_config["Privileged"]


@pytest.mark.parametrize("point", ["before_create", "before_start"])
def test_a_source_swapped_for_a_symlink_to_run_is_never_mounted(
    executor_factory, prefix, docker_client, tmp_path, monkeypatch, point
):
    """A tenant that comes to share the models directory after the command arrived (after
    the pull; between create and start) swaps the admitted source for a symlink to the
    host's /run. (A tenant there before the command makes it refused at once:
    test_bind_swap_loop.py.)"""
    models = tmp_path / "models"
    (models / "x").mkdir(parents=True)
    policy = tmp_path / "policy.json"
    policy.write_text(f'{{"allow_bind": ["{models}"]}}')
    monkeypatch.setenv("FADEN_TEST_HOOKS", "1")
    monkeypatch.setenv("FADEN_TEST_HOOK_PAUSE", f"{point}/3")
    agent, ex = executor_factory(policy_file=policy)
    victim = f"{prefix}-victim"
    ex.send("swap", "container.run", {"name": victim, "image": TEST_IMAGE, "command": ["sleep", "300"],
                                      "mounts": [{"source": str(models / "x"), "target": "/x"}]})  # fmt: skip
    marker = Path(agent.env["FADEN_NODE_AGENT_RUNTIME_DIR"]) / f"paused-{point}"
    wait_for(marker.exists, 30, what=f"the executor paused at {point}")
    tenant = docker_client.containers.run(
        TEST_IMAGE, ["sleep", "300"], name=f"{prefix}-tenant", detach=True, volumes={str(models): {"bind": "/models"}}
    )
    swapped = tenant.exec_run(["sh", "-c", "rmdir /models/x && ln -s /run /models/x"])
    assert swapped.exit_code == 0, swapped.output
    done = ex.wait_terminal("swap", 60)
    assert (done["state"], done["reason"]) == ("failed", "policy_denied"), done
    assert f"which container {prefix}-tenant binds writable" in done["message"], done
    assert not docker_client.containers.list(all=True, filters={"name": victim})  # none made, or removed


def test_a_start_after_the_swap_is_refused(executor_factory, prefix, docker_client, tmp_path):
    """Docker resolves bind sources again at every start: container.start judges them again."""
    models = tmp_path / "models"
    (models / "x").mkdir(parents=True)
    policy = tmp_path / "policy.json"
    policy.write_text(f'{{"allow_bind": ["{models}"]}}')
    agent, ex = executor_factory(policy_file=policy)
    name = f"{prefix}-again"
    spec = {"name": name, "image": TEST_IMAGE, "command": ["sleep", "300"], "ray": True,
            "mounts": [{"source": str(models / "x"), "target": "/x"}]}  # fmt: skip
    assert ex.run("first", "container.run", spec)["state"] == "succeeded"
    assert ex.run("stop", "container.stop", {"name": name, "timeout_s": 0})["state"] == "succeeded"
    (models / "x").rmdir()
    (models / "x").symlink_to("/run")  # as a tenant sharing the directory would
    again = ex.run("again", "container.start", {"name": name})
    assert (again["state"], again["reason"]) == ("failed", "policy_denied"), again
    assert not docker_client.api.inspect_container(name)["State"]["Running"]


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
