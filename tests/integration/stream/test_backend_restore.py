"""The backend goes back in time: the reference backend is stopped, its
database is put back from a copy taken earlier (what `faden restore` does) and started.

- an agent enrolled before the copy holds a cursor from the lost future; the backend's new
  epoch makes it start over, so commands sent afterwards run (not dropped as
  `seq <= cursor`);
- an agent enrolled after the copy is unknown to the restored backend: its credential is
  rejected; started again with a new token (the install line run again) it re-enrolls as
  the same agent, and its running container is adopted and reported, not recreated;
- a token file written while the agent runs with a rejected credential re-enrolls it
  without restarting the agent (its stream worker restarts and enrolls again; the
  executor reports its containers to the new node).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from faden_agent.node.membership import load_membership
from tests.conftest import TEST_IMAGE
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import agent_env_for, agent_on_backend, backend  # noqa: F401
from tests.support.executorproc import prefix  # noqa: F401

pytestmark = pytest.mark.docker


def copy_database(source: Path, target: Path) -> None:
    """The backend's database files (a stopped backend: no transaction in flight)."""
    for old in target.glob("backend.sqlite*"):
        old.unlink()
    target.mkdir(parents=True, exist_ok=True)
    for path in source.glob("backend.sqlite*"):
        shutil.copy2(path, target / path.name)


def run_container(backend, node_id: str, name: str) -> dict:
    command_id = backend.send_command(
        node_id, "container.run", {"name": name, "image": TEST_IMAGE, "command": ["sleep", "600"]}
    )
    done = backend.wait_command(command_id, timeout_s=60)
    assert done["state"] == "succeeded", done
    return done


def link_state(agent) -> str | None:
    stream = agent.workers().get("stream") or {}
    return ((stream.get("status") or {}).get("link") or {}).get("state")


def test_restored_backend_runs_new_commands_and_a_later_node_reenrolls(
    backend,
    agent_on_backend,
    prefix,
    docker_client,
    tmp_path,
):
    early, early_node = agent_on_backend(docker_timeout_sec=5)
    early_name = f"{prefix}-early"
    run_container(backend, early_node["node_id"], early_name)

    backend.stop()
    backup = tmp_path / "backup"
    copy_database(backend.data_dir, backup)
    backend.start()

    late, late_node = agent_on_backend(docker_timeout_sec=5)
    late_name = f"{prefix}-late"
    run_container(backend, late_node["node_id"], late_name)
    before = docker_client.api.inspect_container(late_name)
    for _ in range(3):  # the early agent's cursor moves past everything the copy holds
        done = backend.wait_command(
            backend.send_command(early_node["node_id"], "container.start", {"name": early_name})
        )
        assert done["state"] == "succeeded", done

    backend.stop()
    copy_database(backup, backend.data_dir)
    backend.start()

    # Commands sent after the restore run on the early node.
    stopped = backend.wait_command(
        backend.send_command(early_node["node_id"], "container.stop", {"name": early_name, "timeout_s": 1}),
        timeout_s=30,
    )
    assert stopped["state"] == "succeeded", stopped
    assert not docker_client.api.inspect_container(early_name)["State"]["Running"]
    assert "epoch changed" in early.log_path.read_text()

    # The late node is unknown to the restored backend; a new token re-enrolls it.
    wait_for(lambda: link_state(late) == "credential_rejected", 30, interval_s=0.2, what="credential_rejected")
    agent_id = late.env["FADEN_NODE_AGENT_AGENT_ID"]
    late.stop()
    late.env["FADEN_NODE_AGENT_ENROLLMENT_TOKEN"] = backend.mint_token()
    late.start()
    node = backend.wait_node(agent_id, timeout_s=30)
    assert node["node_id"] != late_node["node_id"]
    state_path = Path(late.env["FADEN_NODE_AGENT_STATE_PATH"])
    state = load_membership(state_path)
    assert state is not None and state.node_id == node["node_id"] and state.agent_id == agent_id
    kept = list(state_path.parent.glob(state_path.name + ".rejected-*"))
    assert len(kept) == 1 and orjson.loads(kept[0].read_bytes())["node_id"] == late_node["node_id"]

    def adopted() -> list[dict]:
        return [
            e
            for e in backend.events(node["node_id"])
            if (e.get("data") or e).get("type") == "container.adopted" and (e.get("data") or e).get("name") == late_name
        ]

    event = wait_for(adopted, 30, interval_s=0.2, what="the late container adopted at the new node")[0]
    assert (event.get("data") or event)["container_id"] == before["Id"]
    after = docker_client.api.inspect_container(late_name)
    assert after["Id"] == before["Id"] and after["State"]["StartedAt"] == before["State"]["StartedAt"]
    assert after["State"]["Running"]
    wait_for(lambda: link_state(late) == "connected", 30, interval_s=0.2, what="the re-enrolled link connected")


def test_a_new_token_file_while_the_credential_is_rejected_re_enrolls_without_a_restart(
    backend,
    prefix,
    docker_client,
    tmp_path,
):
    token_file = tmp_path / "token"
    token_file.write_text(backend.mint_token() + "\n")
    env = agent_env_for(backend, tmp_path, token=None, enrollment_token_file=token_file, docker_timeout_sec=5)
    agent = AgentProcess(env, tmp_path / "agent.log").start()
    try:
        agent_id = env["FADEN_NODE_AGENT_AGENT_ID"]
        node = backend.wait_node(agent_id)
        name = f"{prefix}-kept"
        run_container(backend, node["node_id"], name)
        before = docker_client.api.inspect_container(name)
        backend.admin.revoke(node["node_id"])
        # The file still holds the token this node was enrolled with: reported, not re-tried.
        wait_for(lambda: link_state(agent) == "credential_rejected", 30, interval_s=0.2, what="credential_rejected")
        assert len([r for r in backend.admin.requests_log() if r["path"].endswith("/enroll")]) == 1

        token_file.write_text(backend.mint_token() + "\n")  # the operator's fix, the agent left running
        renewed = wait_for(
            lambda: next(
                (
                    n
                    for n in backend.nodes()
                    if n["agent_id"] == agent_id and n["node_id"] != node["node_id"] and n["heartbeats"] >= 1
                ),
                None,
            ),
            60,
            interval_s=0.2,
            what="the same agent enrolled again",
        )
        assert agent.proc.poll() is None  # the agent process was never restarted; its stream worker was
        stream = agent.workers()["stream"]
        assert "enroll again" in (stream.get("last_exit") or ""), stream
        state = load_membership(Path(env["FADEN_NODE_AGENT_STATE_PATH"]))
        assert state is not None and state.node_id == renewed["node_id"] and state.agent_id == agent_id
        wait_for(lambda: link_state(agent) == "connected", 30, interval_s=0.2, what="connected again")
        # The executor (never restarted) reports its container to the new node; it runs on.
        event = wait_for(
            lambda: [
                e
                for e in backend.events(renewed["node_id"])
                if (e.get("data") or e).get("type") == "container.adopted" and (e.get("data") or e).get("name") == name
            ],
            30,
            interval_s=0.2,
            what="the container reported to the new node",
        )[0]
        assert (event.get("data") or event)["container_id"] == before["Id"]
        after = docker_client.api.inspect_container(name)
        assert after["State"]["StartedAt"] == before["State"]["StartedAt"] and after["State"]["Running"]
    finally:
        agent.stop()


def handed_over(agent, command_id: str) -> int:
    """How often the agent's downlink handed this command to its executor as new."""
    return sum(
        f"command {command_id} (" in line and "duplicate=False" in line
        for line in agent.log_path.read_text().splitlines()
    )


def test_a_whole_data_directory_restored_three_commands_back_runs_the_next_command_once(
    backend,
    agent_on_backend,
    prefix,
    docker_client,
    tmp_path,
):
    """What a backup tool restores: the database and every file beside it (the high-water
    file too, so the backend keeps its epoch and cannot tell). The agent sees `high_seq`
    below its cursor; the next command (a seq it already used, a new id) runs."""
    agent, node = agent_on_backend(docker_timeout_sec=5)
    first = run_container(backend, node["node_id"], f"{prefix}-0")["id"]

    backend.stop()
    backup = tmp_path / "whole-backup"
    shutil.copytree(backend.data_dir, backup)
    backend.start()
    later = []
    for n in (1, 2, 3):
        later.append(
            backend.send_command(
                node["node_id"],
                "container.run",
                {"name": f"{prefix}-{n}", "image": TEST_IMAGE, "command": ["sleep", "600"]},
            )
        )
        assert backend.wait_command(later[-1], timeout_s=60)["state"] == "succeeded"
    first_seq = backend.command(later[0])["seq"]
    started = {n: docker_client.api.inspect_container(f"{prefix}-{n}")["State"]["StartedAt"] for n in range(4)}

    backend.stop()
    shutil.rmtree(backend.data_dir)
    shutil.copytree(backup, backend.data_dir)
    backend.start()

    command_id = backend.send_command(
        node["node_id"], "container.run", {"name": f"{prefix}-4", "image": TEST_IMAGE, "command": ["sleep", "600"]}
    )
    assert backend.command(command_id)["seq"] == first_seq  # a number the agent already acknowledged
    done = backend.wait_command(command_id, timeout_s=60)
    assert done["state"] == "succeeded", done
    assert docker_client.api.inspect_container(f"{prefix}-4")["State"]["Running"]
    assert "below the cursor" in agent.log_path.read_text()
    for n in range(4):  # nothing recreated or restarted
        assert docker_client.api.inspect_container(f"{prefix}-{n}")["State"]["StartedAt"] == started[n]
    assert [handed_over(agent, c) for c in later] == [1, 1, 1]
    assert handed_over(agent, command_id) == 1
    # The command the copy holds came again (the cursor went back to 0): answered from the
    # executor's journal, not run a second time.
    assert handed_over(agent, first) == 1
    assert f"command {first} (container.run, seq 1) handed to the executor: accepted=True duplicate=True" in (
        agent.log_path.read_text()
    )
