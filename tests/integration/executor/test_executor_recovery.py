"""Crashes and restarts: kill -9 of the executor mid-command, the whole agent stopped or
killed, adoption of running containers on start. Real processes, real signals."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from faden_agent import protocol
from tests.conftest import TEST_IMAGE
from tests.support.agentproc import wait_for
from tests.support.executorproc import big_image, executor_factory, executor_pid, prefix  # noqa: F401

pytestmark = pytest.mark.docker


def kill_executor_and_wait_restart(agent) -> None:
    old = executor_pid(agent)
    os.kill(old, signal.SIGKILL)
    wait_for(
        lambda: (w := agent.workers().get("executor")) and w["pid"] != old and w["state"] == "RUNNING",
        20,
        what="the executor restarted by the supervisor",
    )


def test_kill_9_of_the_executor_during_a_long_pull(executor_factory, prefix, big_image, docker_client):
    agent, ex = executor_factory()
    cid = f"{prefix}-pull"
    ex.send(cid, "image.pull", {"image": big_image})
    wait_for(lambda: any(r["data"].get("bytes_done", 0) > 0 for r in ex.timeline(cid)), 60, what="pull progress")
    kill_executor_and_wait_restart(agent)
    done = ex.wait_terminal(cid, 120)
    assert done["state"] == "succeeded", done
    assert any(r["data"].get("phase") == "resumed" for r in ex.timeline(cid))
    assert docker_client.images.get(big_image)


def test_kill_9_of_the_executor_during_a_start_leaves_one_container(executor_factory, prefix, docker_client):
    agent, ex = executor_factory()
    cid, name = f"{prefix}-run", f"{prefix}-slow"
    spec = {
        "name": name,
        "image": TEST_IMAGE,
        "command": ["sh", "-c", "sleep 2; touch /tmp/ready; sleep 300"],
        "healthcheck": {"test": ["CMD-SHELL", "test -f /tmp/ready"], "interval_s": 0.3, "retries": 50},
    }
    ex.send(cid, "container.run", spec)
    wait_for(lambda: docker_client.containers.list(filters={"name": name}), 20, what="the container created")
    kill_executor_and_wait_restart(agent)
    done = ex.wait_terminal(cid, 60)
    assert done["state"] == "succeeded", done
    assert done["result"]["status"] == "healthy" and done["result"]["created"] is False
    assert len(docker_client.containers.list(all=True, filters={"name": name})) == 1
    assert ex.states(cid).count("started") == 2  # the attempt before the kill and the resumed one


# Long enough that a loaded machine still sees the container before the deadline ends the
# command (the executor would remove it first), short enough to pass while the agent is down.
DEADLINE_S = 8


def test_a_create_meeting_its_own_container_still_in_flight_starts_that_one(
    executor_factory, prefix, docker_client, monkeypatch
):
    """A predecessor killed while the engine still made its container: the next attempt's
    lookup finds no container and its create meets the name taken (the engine holds it
    first). The holder is this command's own: it is started, not failed as a conflict."""
    monkeypatch.setenv("FADEN_TEST_HOOKS", "1")
    monkeypatch.setenv("FADEN_TEST_HOOK_PAUSE", "before_create/3")
    agent, ex = executor_factory()
    cid, name = f"{prefix}-inflight", f"{prefix}-inflight"
    ex.send(cid, "container.run", {"name": name, "image": TEST_IMAGE, "command": ["sleep", "300"]})
    marker = Path(agent.env["FADEN_NODE_AGENT_RUNTIME_DIR"]) / "paused-before_create"
    wait_for(marker.exists, 30, what="the executor between its lookup and its create")
    labels = {protocol.LABEL_MANAGED: "true", protocol.LABEL_AGENT_ID: "fx-agent", protocol.LABEL_COMMAND_ID: cid}
    held = docker_client.containers.create(TEST_IMAGE, ["sleep", "300"], name=name, labels=labels)
    done = ex.wait_terminal(cid, 60)
    assert done["state"] == "succeeded", done
    assert (done["result"]["container_id"], done["result"]["created"]) == (held.id, False)
    assert [c.id for c in docker_client.containers.list(all=True, filters={"name": name})] == [held.id]


def test_command_in_flight_past_its_deadline_is_reported_interrupted(executor_factory, prefix, docker_client):
    agent, ex = executor_factory()
    cid, name = f"{prefix}-run", f"{prefix}-never"
    spec = {
        "name": name,
        "image": TEST_IMAGE,
        "command": ["sleep", "300"],
        "deadline_s": DEADLINE_S,
        "healthcheck": {"test": ["CMD-SHELL", "false"], "interval_s": 5, "retries": 5},
    }
    sent_at = time.monotonic()
    ex.send(cid, "container.run", spec)
    wait_for(lambda: "started" in ex.states(cid), 10, what="started")
    # kill once the container exists: "started" is recorded before the engine creates it
    # the low-level list inspects nothing: no NotFound when a container goes while it is listed
    wait_for(lambda: docker_client.api.containers(all=True, filters={"name": name}), 20, what="the container created")
    agent.kill()  # the whole agent, kill -9
    time.sleep(max(0.0, sent_at + DEADLINE_S + 0.5 - time.monotonic()))  # the deadline passes while it is down
    agent.start()
    done = ex.wait_terminal(cid, 20)
    assert (done["state"], done["reason"]) == ("failed", "interrupted"), done
    assert "removed the container" in done["message"]
    assert not docker_client.containers.list(all=True, filters={"name": name})


def test_containers_outlive_the_agent_and_are_adopted_on_start(executor_factory, prefix, docker_client):
    agent, ex = executor_factory()
    names = [f"{prefix}-keep{i}" for i in range(2)]
    for i, name in enumerate(names):
        assert (
            ex.run(
                f"{prefix}-run{i}",
                "container.run",
                {"name": name, "image": TEST_IMAGE, "command": ["sleep", "300"], "cluster": "c1"},
            )["state"]
            == "succeeded"
        )

    def adopted_names(starts: int):
        seen = [e for e in ex.events("container.adopted") if e["name"] in names]
        return seen if len(seen) >= starts * len(names) else None  # reported once per start

    def summaries(starts: int) -> bool:  # written right after a start's per-container events
        return len([e for e in ex.events("executor.adoption") if set(names) <= set(e["names"])]) >= starts

    agent.stop()  # orderly stop
    assert all(docker_client.containers.get(n).status == "running" for n in names)
    agent.start()
    wait_for(lambda: adopted_names(1), 20, what="adoption events after the restart")
    # the kill below must not land between the events and their summary (that start's is lost)
    wait_for(lambda: summaries(1), 20, what="the adoption summary after the restart")
    agent.kill()  # and kill -9 of the whole process group
    assert all(docker_client.containers.get(n).status == "running" for n in names)
    agent.start()
    adopted = wait_for(lambda: adopted_names(2), 20, what="adoption events after the second start")
    assert {e["cluster"] for e in adopted} == {"c1"} and {e["status"] for e in adopted} == {"running"}
    wait_for(lambda: summaries(2), 20, what="an adoption summary per start")
    # and they are still managed: the restarted agent can stop them
    assert ex.run(f"{prefix}-stop", "container.stop", {"name": names[0], "timeout_s": 0})["state"] == "succeeded"
