"""A command on a downlink line over the stream cap (MAX_STREAM_LINE_BYTES, 1,040 KiB) gets a
terminal state like any command too big: the real reference backend
queues it and streams it, the real agent reads only the line's first bytes, names the
command by them and ends it rejected/too_large; the command after it runs."""

from __future__ import annotations

import os

import pytest

from faden_agent import protocol
from faden_agent.backend.client import MAX_STREAM_LINE
from tests.conftest import TEST_IMAGE
from tests.support.agentproc import wait_for
from tests.support.backendproc import agent_on_backend, backend  # noqa: F401
from tests.support.executorproc import prefix  # noqa: F401

pytestmark = pytest.mark.docker


def terminal(command: dict) -> dict:
    return next(r for r in command["timeline"] if r["state"] in protocol.TERMINAL_STATES)


def test_a_command_over_the_stream_cap_ends_too_large_and_the_next_runs(backend, agent_on_backend, prefix):
    agent, node = agent_on_backend(docker_timeout_sec=5)
    spec = {"name": f"{prefix}-huge", "image": TEST_IMAGE, "env": {"BIG": os.urandom(MAX_STREAM_LINE // 2 + 1).hex()}}
    huge_id = backend.send_command(node["node_id"], "container.run", spec)  # a stream line over the cap
    next_id = backend.send_command(
        node["node_id"], "container.run", {"name": f"{prefix}-next", "image": TEST_IMAGE, "command": ["sleep", "300"]}
    )

    huge = backend.wait_command(huge_id)
    assert huge["state"] == protocol.REJECTED and terminal(huge)["reason"] == "too_large", huge
    assert "container.run" in terminal(huge)["message"]  # the kind, read from the line's beginning
    assert backend.wait_command(next_id)["state"] == protocol.SUCCEEDED
    wait_for(
        lambda: "is on a stream line of" in agent.log_text(),
        10,
        what="the agent's log line naming the over-cap command",
    )
    assert agent.workers()["stream"]["restarts"] == 0
