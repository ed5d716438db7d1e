"""Identity over real sockets with the reference backend and a real agent: credential
rotation over the stream (old credential valid until the new one is used, the state file
rewritten atomically 0600, nothing lost when the stream worker is killed mid-rotation), the
machine fingerprint (two machines with one state file are flagged) and what `status` shows
of the version and capabilities the backend expects."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest

from faden_agent import protocol
from faden_agent.cli.status import collect_status, format_status
from faden_agent.config import load_config
from faden_agent.node.membership import load_membership
from tests.conftest import TEST_IMAGE
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import accepted, agent_env_for, agent_on_backend, backend  # noqa: F401
from tests.support.executorproc import prefix  # noqa: F401


def state_of(agent):
    return load_membership(Path(agent.env["FADEN_NODE_AGENT_STATE_PATH"]))


def rotate_and_wait(backend, agent, node_id: str) -> tuple[str, str]:
    old = state_of(agent).credential
    backend.admin.rotate_credential(node_id)
    wait_for(lambda: state_of(agent).credential != old, 30, interval_s=0.1, what="the state file's new credential")
    wait_for(lambda: not backend.admin.node(node_id)["credential_rotating"], 30, interval_s=0.1, what="confirmed")
    return old, state_of(agent).credential


@pytest.mark.docker
def test_rotation_over_the_stream_replaces_the_credential_and_commands_go_on(backend, agent_on_backend, prefix):
    agent, node = agent_on_backend(docker_timeout_sec=5)
    old, new = rotate_and_wait(backend, agent, node["node_id"])
    assert accepted(backend, new) == 200 and accepted(backend, old) == 401  # the old one ends once the new is used
    path = Path(agent.env["FADEN_NODE_AGENT_STATE_PATH"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert old not in agent.log_path.read_text() and new not in agent.log_path.read_text()
    done = backend.wait_command(
        backend.send_command(
            node["node_id"],
            "container.run",
            {"name": f"{prefix}-after", "image": TEST_IMAGE, "command": ["sleep", "60"]},
        ),
        timeout_s=60,
    )
    assert done["state"] == "succeeded", done


def test_the_old_credential_holds_until_the_new_one_is_used(backend, agent_on_backend):
    agent, node = agent_on_backend()
    agent.stop()  # nobody takes delivery
    old = state_of(agent).credential
    backend.admin.rotate_credential(node["node_id"])
    assert backend.admin.node(node["node_id"])["credential_rotating"]
    assert accepted(backend, old) == 200  # still valid: the new one was never used
    agent.start()
    wait_for(lambda: state_of(agent).credential != old, 30, interval_s=0.1, what="delivered after the restart")
    wait_for(lambda: accepted(backend, old) == 401, 30, interval_s=0.2, what="the old credential retired")


@pytest.mark.parametrize(
    "kill_between", ["credential_received/credential_written", "credential_written/credential_used"]
)
def test_a_stream_worker_killed_mid_rotation_loses_nothing(backend, tmp_path, kill_between):
    env = agent_env_for(backend, tmp_path)
    env.update(FADEN_TEST_HOOKS="1", FADEN_TEST_HOOK_KILL_BETWEEN=kill_between)
    agent = AgentProcess(env, tmp_path / "agent.log").start()
    try:
        node = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])
        stream_pid = agent.workers()["stream"]["pid"]
        old, new = rotate_and_wait(backend, agent, node["node_id"])
        assert (tmp_path / "run" / f"killed-{kill_between.replace('/', '-')}").exists()  # the kill happened
        assert agent.workers()["stream"]["pid"] != stream_pid
        assert accepted(backend, new) == 200 and accepted(backend, old) == 401
        before = backend.admin.node(node["node_id"])["heartbeats"]
        wait_for(
            lambda: backend.admin.node(node["node_id"])["heartbeats"] > before, 15, what="heartbeats with the new one"
        )
        assert not list(Path(env["FADEN_NODE_AGENT_STATE_PATH"]).parent.glob(".state.json-*"))  # no temp file left
    finally:
        agent.stop()


def test_two_machines_with_one_state_file_are_flagged(backend, tmp_path):
    """A cloned disk: the same state file (node, credential) on a machine with other hardware
    ids (its own sysfs: another DMI product_uuid)."""

    def machine(name: str, uuid: str) -> Path:
        root = tmp_path / name / "sys"
        (root / "class" / "dmi" / "id").mkdir(parents=True)
        (root / "class" / "dmi" / "id" / "product_uuid").write_text(uuid + "\n")
        return root

    first_env = agent_env_for(backend, tmp_path / "one", sysfs_root=machine("one", "4c4c4544-0001"))
    first = AgentProcess(first_env, tmp_path / "one.log").start()
    clone_env = dict(first_env)
    try:
        node = backend.wait_node(first_env["FADEN_NODE_AGENT_AGENT_ID"])
        wait_for(lambda: backend.admin.node(node["node_id"])["fingerprint"], 15, what="a fingerprint")
        assert not backend.admin.node(node["node_id"])["shared_identity"]
        clone_root = tmp_path / "two"
        shutil.copytree(Path(first_env["FADEN_NODE_AGENT_STATE_PATH"]).parent, clone_root / "state")
        clone_env.update(
            FADEN_NODE_AGENT_STATE_PATH=str(clone_root / "state" / "state.json"),
            FADEN_NODE_AGENT_RUNTIME_DIR=str(clone_root / "run"),
            FADEN_NODE_AGENT_RAY_LOG_DIR=str(clone_root / "ray"),
            FADEN_NODE_AGENT_SYSFS_ROOT=str(machine("two", "4c4c4544-0002")),
        )
        clone_env.pop("FADEN_NODE_AGENT_ENROLLMENT_TOKEN")
        clone = AgentProcess(clone_env, tmp_path / "two.log").start()
        try:
            flagged = wait_for(
                lambda: backend.admin.node(node["node_id"])["shared_identity"], 30, what="the shared identity flagged"
            )
            assert flagged is True and len(backend.nodes()) == 1
        finally:
            clone.stop()
    finally:
        first.stop()


def test_status_shows_the_expected_version_and_the_missing_capabilities(backend, agent_on_backend):
    agent, node = agent_on_backend()
    config = load_config(agent.env)
    wait_for(lambda: collect_status(config)["running_version"], 15, what="the first hello noted")
    assert collect_status(config)["missing_capabilities"] == []
    backend.admin.expect("9.9.9", [*protocol.CAPABILITIES, "future.thing"])
    status = wait_for(
        lambda: (s := collect_status(config))["expected_version"] == "9.9.9" and s, 15, what="the new expectations"
    )
    assert status["missing_capabilities"] == ["future.thing"]
    text = format_status(status)
    assert f"version:       {status['running_version']} (the backend expects 9.9.9)" in text
    assert "lacks:         future.thing (the backend expects them)" in text
