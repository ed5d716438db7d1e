"""Terminal records are never lost: the executor is killed between marking a
command done in its journal and writing the terminal record to the outbox."""

from __future__ import annotations

import pytest

from faden_agent import protocol
from faden_agent.config import load_config
from faden_agent.workers.executor.journal import Journal
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import agent_env_for, backend  # noqa: F401
from tests.support.executorproc import prefix  # noqa: F401

pytestmark = pytest.mark.docker


def test_kill_9_between_done_and_outbox_still_delivers_the_terminal_record(backend, prefix, tmp_path, docker_client):
    env = agent_env_for(backend, tmp_path)
    env.update(FADEN_TEST_HOOKS="1", FADEN_TEST_HOOK_KILL_BETWEEN="done/outbox")
    with AgentProcess(env, tmp_path / "agent.log") as agent:
        node = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])
        check_replay(backend, agent, node, prefix)


def check_replay(backend, agent, node, prefix):
    executor_pid = agent.workers()["executor"]["pid"]
    # Runs on a command thread after the ack (it asks the engine), so the downlink will
    # not hand it over again: only the journal knows it finished.
    command_id = backend.send_command(node["node_id"], "container.remove", {"name": f"{prefix}-absent"})
    rows = wait_for(
        lambda: (
            (w := agent.workers())
            and w["executor"]["pid"] not in (None, executor_pid)
            and w["executor"]["state"] == "RUNNING"
            and w
        ),
        30,
        what="the executor killed by the hook and back",
    )
    assert rows["executor"]["last_exit"] == "signal SIGKILL"
    command = backend.wait_command(command_id, timeout_s=30)
    terminal = [r for r in command["timeline"] if r["state"] in protocol.TERMINAL_STATES]
    assert len(terminal) == 1, command["timeline"]
    assert "re-emitted the terminal records of 1 finished command" in agent.log_text()
    config = load_config(agent.env)
    assert Journal(config.state_dir).unreported() == []


def test_kill_9_between_the_journal_and_the_received_record_keeps_the_timeline_in_order(
    backend, prefix, tmp_path, docker_client
):
    """Killed after journaling a new command but before its `received` record: the restarted
    executor resumes it, and `received` still comes first, before `started` (the chaos run
    once saw it only on the redelivery's replay, after the terminal record)."""
    env = agent_env_for(backend, tmp_path)
    env.update(FADEN_TEST_HOOKS="1", FADEN_TEST_HOOK_KILL_BETWEEN="journal/received")
    with AgentProcess(env, tmp_path / "agent.log") as agent:
        node = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])
        executor_pid = agent.workers()["executor"]["pid"]
        command_id = backend.send_command(node["node_id"], "container.remove", {"name": f"{prefix}-absent"})
        wait_for(lambda: agent.workers()["executor"]["pid"] not in (None, executor_pid), 30, what="the hook's kill")
        command = backend.wait_command(command_id, timeout_s=30)
        states = [r["state"] for r in command["timeline"]]  # in the records' own time order
        assert states[0] == "received" and states.count("received") == 1, states
        assert states[-1] in protocol.TERMINAL_STATES and command["state"] == states[-1], states
