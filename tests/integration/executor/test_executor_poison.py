"""Poison commands end as commands, never as the executor: the real supervisor
with the real executor, bad commands over its real socket, real kill -9."""

from __future__ import annotations

import os
import signal
import uuid

import pytest
from hypothesis import HealthCheck, given, settings

from faden_agent import protocol
from tests.conftest import TEST_IMAGE
from tests.support.agentproc import wait_for
from tests.support.executorproc import executor_factory, executor_pid, prefix  # noqa: F401
from tests.support.smallengine import small_engine
from tests.support.specfuzz import mutated

pytestmark = pytest.mark.docker

POISON_SPECS = [  # each once made a validator raise something other than its own error, or could
    ("container.run", {"name": "p", "image": "x", "shm_size": "9" * 5000}),
    ("container.run", {"name": "p", "image": "x", "shm_size": "99999999999999999999g"}),
    ("container.run", {"name": "p", "image": "x", "ulimits": {"nofile": 2**64 - 1}}),
    ("container.run", {"name": "p\n", "image": "x"}),
    ("container.run", {"name": "p", "image": "x", "mounts": [{"target": "/x" * 10_000}]}),
    ("container.stop", [1, 2, 3]),
    ("x" * 5000, {}),
]


def assert_executor_alive(agent, restarts: int = 0) -> None:
    worker = agent.workers()["executor"]
    assert worker["state"] == "RUNNING" and worker["restarts"] == restarts, worker


def run_a_valid_command(ex, prefix: str, tag: str) -> None:
    done = ex.run(
        f"{prefix}-ok-{tag}",
        "container.run",
        {"name": f"{prefix}-ok-{tag}", "image": TEST_IMAGE, "command": ["sleep", "300"]},
    )
    assert done["state"] == "succeeded", done


def test_poison_specs_are_rejected_and_later_commands_run(executor_factory, prefix):
    agent, ex = executor_factory()
    for i, (kind, spec) in enumerate(POISON_SPECS):
        done = ex.run(f"{prefix}-poison{i}", kind, spec, timeout_s=10)
        assert done["state"] == "rejected" and done["reason"] in ("invalid_spec", "unknown_kind"), done
        assert len(done["message"]) < 1000, done  # a bad value is quoted, not echoed whole
    run_a_valid_command(ex, prefix, "after-poison")
    assert_executor_alive(agent)


def test_an_over_size_command_is_acknowledged_and_rejected_once(executor_factory, prefix):
    agent, ex = executor_factory()
    spec = {"name": f"{prefix}-big", "image": TEST_IMAGE, "env": {"BIG": "x" * (protocol.MAX_SPEC_BYTES + 1)}}
    ack = ex.send(f"{prefix}-big", "container.run", spec)
    assert ack["accepted"] and not ack["duplicate"], ack
    done = ex.wait_terminal(f"{prefix}-big", 10)
    assert (done["state"], done["reason"]) == ("rejected", "too_large"), done
    assert len(done["message"]) < 500
    again = ex.send(f"{prefix}-big", "container.run", spec)  # a re-delivery is answered, not run
    assert again["duplicate"], again
    run_a_valid_command(ex, prefix, "after-big")
    assert_executor_alive(agent)


def test_a_command_running_at_two_executor_deaths_in_a_row_fails_as_poison(executor_factory, prefix, docker_client):
    agent, ex = executor_factory()
    cid, name = f"{prefix}-killer", f"{prefix}-killer"
    spec = {
        "name": name,
        "image": TEST_IMAGE,
        "command": ["sleep", "300"],
        "deadline_s": 600,
        "healthcheck": {"test": ["CMD-SHELL", "false"], "interval_s": 60, "retries": 5},
    }  # never healthy
    ex.send(cid, "container.run", spec)
    for death in (1, 2):
        wait_for(lambda death=death: ex.states(cid).count("started") == death, 30, what=f"attempt {death} started")
        old = executor_pid(agent)
        os.kill(old, signal.SIGKILL)  # the command "kills" the executor while it runs
        wait_for(
            lambda old=old: (w := agent.workers().get("executor")) and w["pid"] != old and w["state"] == "RUNNING",
            30,
            what="the executor restarted by the supervisor",
        )
    done = ex.wait_terminal(cid, 30)
    assert (done["state"], done["reason"]) == ("failed", "poison"), done
    assert ex.states(cid).count("started") == 2  # not run a third time
    run_a_valid_command(ex, prefix, "after-deaths")
    assert_executor_alive(agent, restarts=2)


def test_an_orderly_restart_is_not_a_death(executor_factory, prefix):
    agent, ex = executor_factory()
    cid = f"{prefix}-slow"
    spec = {
        "name": cid,
        "image": TEST_IMAGE,
        "command": ["sleep", "300"],
        "deadline_s": 600,
        "healthcheck": {"test": ["CMD-SHELL", "false"], "interval_s": 60, "retries": 5},
    }
    ex.send(cid, "container.run", spec)
    for attempt in (1, 2):
        wait_for(
            lambda attempt=attempt: ex.states(cid).count("started") == attempt, 30, what=f"attempt {attempt} started"
        )
        agent.stop()  # SIGTERM: the executor stops in order
        agent.start()
    wait_for(lambda: ex.states(cid).count("started") == 3, 30, what="a third attempt after two orderly stops")
    assert ex.terminal(cid) is None
    ex.send(f"{prefix}-cancel", "command.cancel", {"command_id": cid})
    assert ex.wait_terminal(cid, 30)["state"] == "cancelled"


_STARTED: dict = {}


@pytest.fixture(scope="module")
def fuzz_engine():
    """An engine of the fuzz's own: a valid image.prune or image.remove among the examples
    acts for real, and on the shared engine it removed every other test's cached images
    (the arm64 and systemd build roots, rebuilt for minutes afterwards)."""
    with small_engine("300m", image=TEST_IMAGE) as engine:
        yield engine


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=mutated())
def test_fuzzed_specs_end_as_commands_on_the_real_executor(executor_factory, fuzz_engine, prefix, case):
    """Specs from the key-by-key fuzz (tests/unit/executor/test_fuzz_specs.py) sent to one real executor:
    each ends with one terminal state, and the executor is never restarted."""
    if executor_factory not in _STARTED:  # one agent for all examples (the fixture outlives them)
        _STARTED[executor_factory] = executor_factory(docker_host=fuzz_engine.host)
    agent, ex = _STARTED[executor_factory]
    kind, spec = case
    if kind == "container.run" and isinstance(spec, dict):
        spec = {**spec, "name": f"{prefix}-fz", "pull": "never", "command": ["true"]}  # nothing long-lived
    command_id = f"{prefix}-fz-{uuid.uuid4().hex[:8]}"
    done = ex.run(command_id, kind, spec, timeout_s=30)
    assert done["state"] in protocol.TERMINAL_STATES and done["reason"] != "internal_error", done
    assert_executor_alive(agent)


def test_a_malformed_or_over_size_request_never_wedges_the_executor_socket(executor_factory, prefix):
    """A frame the envelope refuses gets an error reply: a REP socket left without one takes
    no other request (every later command would wait forever) while heartbeats say RUNNING."""
    import zmq

    from faden_agent.ipc.envelope import MAX_MESSAGE_BYTES

    agent, ex = executor_factory()
    for frame in (b"not json", b'{"v": 99}', b"x" * (MAX_MESSAGE_BYTES + 1)):
        context = zmq.Context()
        sock = context.socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(agent.endpoints.executor)
        sock.send(frame)
        answered = sock.poll(3000)
        if len(frame) <= MAX_MESSAGE_BYTES:
            assert answered and b"error" in sock.recv()  # answered, so the socket takes the next one
        sock.close()
        context.term()
    run_a_valid_command(ex, prefix, "after-bad-frames")
    assert_executor_alive(agent)


def test_hostile_ids_and_seqs_are_refused_by_the_executor_as_by_the_downlink(executor_factory, prefix):
    """The executor asks protocol.command_problem as the downlink does (an id measured in
    bytes, not characters; True or 1.5 is no seq) and refuses each with that one line,
    journaling nothing."""
    from faden_agent.ipc import request

    agent, ex = executor_factory()
    spec = {"name": f"{prefix}-h", "image": TEST_IMAGE, "command": ["true"]}
    for field, value in (("seq", True), ("seq", 1.5), ("seq", 2**63), ("id", "é" * 200), ("kind", 3)):
        body = {"id": f"{prefix}-h", "seq": 1, "kind": "container.run", "spec": spec, field: value}
        reply = request(agent.endpoints.executor, "command", body, timeout_s=5)
        assert reply is not None and reply.type == "ack", reply
        assert reply.body["accepted"] is False and reply.body["reason"] == "invalid_spec", (field, value, reply.body)
        assert reply.body["message"] == f"the command is malformed: {protocol.command_problem(body)}"
    assert ex.timeline(f"{prefix}-h") == []  # nothing journaled, nothing run
    run_a_valid_command(ex, prefix, "after-hostile")
    assert_executor_alive(agent)
