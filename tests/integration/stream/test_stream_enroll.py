"""Enrollment against the real reference backend with the real agent."""

from __future__ import annotations

import stat

import orjson

from faden_agent import protocol
from tests.support.agentproc import AgentProcess, agent_status, wait_for
from tests.support.backendproc import agent_env_for, agent_on_backend, backend  # noqa: F401


def test_enroll_restart_no_second_enrollment(backend, agent_on_backend, tmp_path):
    agent, node = agent_on_backend()
    state_path = tmp_path / "agent0" / "state" / "state.json"
    assert stat.S_IMODE(state_path.stat().st_mode) == 0o600
    state_bytes = state_path.read_bytes()
    state = orjson.loads(state_bytes)
    assert state["node_id"] == node["node_id"] and state["backend_url"] == backend.url
    report = wait_for(
        lambda: (s := agent_status(agent.env))["connection"] == "connected" and s, 15, what="status connected"
    )
    assert report["enrolled"] and report["node_id"] == node["node_id"]
    assert report["last_contact_at"] and report["last_error"] is None

    agent.stop()
    stopped = agent_status(agent.env)
    assert stopped["agent_running"] is False and stopped["connection"] == "stopped" and stopped["enrolled"]
    # Restart with the (spent) token still set: already a member, no new enrollment.
    agent.start()
    backend.wait_node(node["agent_id"], heartbeats=node["heartbeats"] + 3)
    assert [n["node_id"] for n in backend.nodes()] == [node["node_id"]]
    assert state_path.read_bytes() == state_bytes
    assert "already a member" in agent.log_text()
    enrolls = [r for r in backend.admin.requests_log() if r["path"].endswith("/enroll")]
    assert len(enrolls) == 1


def test_second_use_of_a_token_is_refused(backend, agent_on_backend, tmp_path):
    token = backend.mint_token()
    first, node = agent_on_backend(enrollment_token=token)
    env = agent_env_for(backend, tmp_path / "second", token=token)
    (tmp_path / "second").mkdir()
    second = AgentProcess(env, tmp_path / "second" / "agent.log").start()
    try:
        report = wait_for(
            lambda: (s := agent_status(env))["connection"] == "enrollment_refused" and s, 20, what="enrollment refused"
        )
        assert "already used" in report["last_error"] and not report["enrolled"]
        assert not (tmp_path / "second" / "state" / "state.json").exists()
        assert len(backend.nodes()) == 1
        assert second.workers()["stream"]["state"] == "RUNNING"  # no crash loop
    finally:
        second.stop()


def test_token_from_a_file(backend, agent_on_backend, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(backend.mint_token() + "\n")
    token_file.chmod(0o600)
    agent, node = agent_on_backend(token=None, enrollment_token_file=token_file)
    assert node["agent_id"] == agent.env["FADEN_NODE_AGENT_AGENT_ID"]


def test_corrupt_and_foreign_state_files_are_reported_and_kept(backend, tmp_path):
    cases = {
        "corrupt": (b"{half a state file", "is corrupt"),
        "foreign": (
            orjson.dumps(
                {
                    "version": 1,
                    "backend_url": "https://other.example",
                    "node_id": "node-x",
                    "credential": "cred-x",
                    "agent_id": "a",
                    "enrolled_at": 1.0,
                }
            ),
            "belongs to backend https://other.example",
        ),
    }
    for name, (content, message) in cases.items():
        root = tmp_path / name
        (root / "state").mkdir(parents=True)
        state_path = root / "state" / "state.json"
        state_path.write_bytes(content)
        env = agent_env_for(backend, root)  # a valid token is set: it must not be used
        agent = AgentProcess(env, root / "agent.log").start()
        try:
            report = wait_for(
                lambda env=env: (s := agent_status(env))["connection"] == "state_error" and s,
                20,
                what=f"{name} state error",
            )
            assert message in report["last_error"]
            assert message in agent.log_text()
        finally:
            agent.stop()
        assert state_path.read_bytes() == content
    assert backend.nodes() == []


def test_rejection_travels_back_as_a_timeline(backend, agent_on_backend):
    agent, node = agent_on_backend()
    command_id = backend.send_command(node["node_id"], "no.such.kind", {"x": 1})
    command = backend.wait_command(command_id)
    assert command["state"] == protocol.REJECTED
    terminal = command["timeline"][-1]
    assert terminal["reason"] in ("unknown_kind", "not_implemented") and terminal["message"]


def test_revoked_credential_is_reported_never_reenrolled(backend, agent_on_backend, tmp_path):
    agent, node = agent_on_backend()
    state_path = tmp_path / "agent0" / "state" / "state.json"
    before = state_path.read_bytes()
    backend.admin.revoke(node["node_id"])
    report = wait_for(
        lambda: (s := agent_status(agent.env))["connection"] == "credential_rejected" and s,
        20,
        what="credential rejected",
    )
    assert "revoked" in report["last_error"]
    assert state_path.read_bytes() == before
    assert len([r for r in backend.admin.requests_log() if r["path"].endswith("/enroll")]) == 1
    assert len(backend.nodes()) == 1


def test_commands_queued_while_the_agent_is_down_arrive_once(backend, agent_on_backend):
    agent, node = agent_on_backend()
    first = backend.send_command(node["node_id"], "no.such.kind")
    backend.wait_command(first)
    agent.stop()
    queued = [backend.send_command(node["node_id"], "no.such.kind", {"n": i}) for i in range(3)]
    log_size = len(agent.log_text())
    agent.start()
    for command_id in [first, *queued]:
        assert backend.wait_command(command_id)["state"] == protocol.REJECTED
    # The durable cursor: the command acknowledged before the restart is not handed over again.
    after_restart = agent.log_text()[log_size:]
    assert "duplicate=True" not in after_restart and first not in after_restart
    assert all(command_id in after_restart for command_id in queued)


def test_death_between_enrollment_and_state_file_is_retried_as_the_same_node(backend, tmp_path):
    """The backend answered, the agent died before its state file was on disk: the next start
    presents the same token and attempt id and becomes the node it was given, not a refusal."""
    from faden_agent.backend.client import BackendClient
    from faden_agent.config import load_config
    from faden_agent.node.membership import enrollment_attempt_id
    from faden_agent.workers.stream.enroll import enrollment_facts

    root = tmp_path / "crashed"
    root.mkdir()
    env = agent_env_for(backend, root)
    config = load_config(env)
    attempt = enrollment_attempt_id(config.state_dir)  # what the agent writes before enrolling
    spent = BackendClient(config).enroll(config.token(), {**enrollment_facts(config), "enrollment_id": attempt})
    assert not config.state_path.exists()  # ... and then it died
    agent = AgentProcess(env, root / "agent.log").start()
    try:
        node = backend.wait_node(config.agent_id, heartbeats=1)
        assert node["node_id"] == spent["node_id"]
        assert [n["node_id"] for n in backend.nodes()] == [spent["node_id"]]
        assert orjson.loads(config.state_path.read_bytes())["node_id"] == spent["node_id"]
        assert not (config.state_dir / "enrollment-attempt").exists()
    finally:
        agent.stop()
