"""A hung Docker engine (kill -STOP of the shared dockerd, kept short): the command fails
with a reason at its deadline, heartbeats stay on time, the executor is not restarted, and
it works again after kill -CONT."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.conftest import TEST_IMAGE
from tests.support.agentproc import wait_for
from tests.support.backendproc import agent_on_backend, backend  # noqa: F401
from tests.support.dockerd import dockerd_pid
from tests.support.executorproc import prefix  # noqa: F401

pytestmark = [pytest.mark.docker, pytest.mark.serial]

STOP_S = 4.0
DEADLINE_S = 1.5


def test_stopped_dockerd_fails_the_command_keeps_heartbeats_and_recovers(
    backend, agent_on_backend, prefix, docker_client
):
    agent, node = agent_on_backend(docker_timeout_sec=2, heartbeat_interval_sec=0.5)
    executor_before = agent.workers()["executor"]
    name = f"{prefix}-hung"
    pid = dockerd_pid()
    beats_before = len(backend.heartbeats(node["node_id"]))
    os.kill(pid, signal.SIGSTOP)
    try:
        command_id = backend.send_command(
            node["node_id"],
            "container.run",
            {"name": name, "image": TEST_IMAGE, "command": ["sleep", "300"], "deadline_s": DEADLINE_S},
        )
        done = backend.wait_command(command_id, timeout_s=STOP_S - 0.5)
        time.sleep(max(0.0, STOP_S - DEADLINE_S - 1.0))
        beats_during = len(backend.heartbeats(node["node_id"])) - beats_before
        executor_during = agent.workers()["executor"]
    finally:
        os.kill(pid, signal.SIGCONT)
    terminal = [r for r in done["timeline"] if r["state"] == "failed"][-1]
    assert terminal["reason"] in ("timeout", "docker_unavailable"), terminal
    assert beats_during >= int(STOP_S / 0.5) - 3, beats_during  # heartbeats kept coming
    assert executor_during["pid"] == executor_before["pid"] and executor_during["state"] == "RUNNING"
    assert executor_during["heartbeat_age_s"] < 1.5

    after = backend.wait_command(
        backend.send_command(
            node["node_id"],
            "container.run",
            {"name": f"{name}-after", "image": TEST_IMAGE, "command": ["sleep", "300"]},
        ),
        timeout_s=30,
    )
    assert after["state"] == "succeeded", after
    # the timed-out run left no container behind once the engine answered again
    wait_for(
        lambda: not docker_client.containers.list(all=True, filters={"name": f"^/{name}$"}),
        15,
        what="the timed-out command's container removed",
    )
