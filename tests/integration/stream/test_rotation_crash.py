"""A rotation survives a crash at any step: the real agent is SIGKILLed (its whole process
group) while a test hook holds it at one step of a rotation, after the retired credential of
an earlier rotation was replayed once; with `power_cut` its connections stay open on the
backend's side (no FIN, tests/support/powercut.py). After the restart it beats again within
seconds, one credential counts, the old ones are refused and a copy of the old disk gets nothing."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
import requests

from faden_agent import protocol
from faden_agent.cli.status import collect_status
from faden_agent.config import load_config
from faden_agent.node.membership import load_membership
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import agent_env_for, backend  # noqa: F401 - fixture
from tests.support.powercut import hold_connections

STEPS = ["stream_opened", "credential_received", "credential_written"]  # sent unread, read unwritten, unconfirmed
BACK_WITHIN_S = 10.0


def status_with(backend, credential: str, stream: bool = False) -> int:
    headers = {"Authorization": f"Bearer {credential}"}
    if stream:
        with requests.get(backend.url + protocol.STREAM_PATH, headers=headers, stream=True, timeout=(5, 5)) as r:
            return r.status_code
    return requests.post(
        backend.url + protocol.UPLINK_PATH, json={"records": []}, headers=headers, timeout=10
    ).status_code


def credential_of(env: dict[str, str]) -> str:
    membership = load_membership(Path(env["FADEN_NODE_AGENT_STATE_PATH"]))
    assert membership is not None
    return membership.credential


def heartbeats(backend, node_id: str) -> int:
    return backend.admin.node(node_id)["heartbeats"]


@pytest.mark.parametrize("cut", ["sigkill", "power_cut"])
@pytest.mark.parametrize("step", STEPS)
def test_a_kill_at_any_step_of_a_rotation_leaves_one_credential(backend, tmp_path, step, cut):  # noqa: F811
    env = agent_env_for(backend, tmp_path)
    agent = AgentProcess(env, tmp_path / "agent.log").start()
    try:
        node_id = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])["node_id"]
        retired = credential_of(env)
        backend.admin.rotate_credential(node_id)  # a first rotation, confirmed
        wait_for(lambda: not backend.admin.node(node_id)["credential_rotating"], 30, what="the first rotation")
        before = credential_of(env)
        assert status_with(backend, retired) == 401  # the replay: refused; the machine goes on
        seen = heartbeats(backend, node_id)
        wait_for(lambda: heartbeats(backend, node_id) > seen, 10, what="heartbeats after the replay")
        agent.stop()
        backend.admin.rotate_credential(node_id)  # the next one: held at `step` below
        held = AgentProcess(
            {**env, "FADEN_TEST_HOOKS": "1", "FADEN_TEST_HOOK_PAUSE": f"{step}/120"}, tmp_path / "held.log"
        ).start()
        marker = Path(env["FADEN_NODE_AGENT_RUNTIME_DIR"]) / f"paused-{step}"
        wait_for(marker.exists, 30, what=f"the agent held at {step}")
        pids = [held.pid, *(w["pid"] for w in held.workers().values() if w.get("pid"))]
        with hold_connections(pids if cut == "power_cut" else [], backend.port) as copies:
            assert cut == "sigkill" or copies  # the stream, at least, stays open at the backend
            held.kill()  # SIGKILL, the whole process group
            marker.unlink()
            on_disk = credential_of(env)
            assert (on_disk != before) == (step == "credential_written")
            agent = AgentProcess(env, tmp_path / "agent.log").start()
            started = time.monotonic()
            seen = heartbeats(backend, node_id)
            wait_for(lambda: heartbeats(backend, node_id) > seen, BACK_WITHIN_S, what="heartbeats after the restart")
            back_s = time.monotonic() - started
            wait_for(lambda: not backend.admin.node(node_id)["credential_rotating"], 30, what="the rotation confirmed")
            now = credential_of(env)
            print(f"{step}/{cut}: beating {back_s:.2f}s after the restart; rotated {before != now}")
            assert now != before and status_with(backend, now) == 200
            assert status_with(backend, before) == 401 and status_with(backend, retired) == 401
            view = backend.admin.node(node_id)
            assert not view["shared_identity"], view
            seen = heartbeats(backend, node_id)
            wait_for(lambda: heartbeats(backend, node_id) > seen, 10, what="heartbeats go on")
            # A copy of the disk from before the rotation opens a stream: refused, and the node contested.
            assert status_with(backend, before, stream=True) == 401
            assert backend.admin.node(node_id)["shared_identity"]
    finally:
        agent.stop()
        agent.kill()


def test_both_holders_refused_then_the_operator_re_enrolls_the_real_machine(backend, tmp_path):  # noqa: F811
    """A contested node (two machines used its credential across a rotation): `status` and
    `doctor` on the real machine say so and what to do; a new token set there re-enrolls it as
    the same agent id under a new node, and the old state file is kept beside."""
    env = agent_env_for(backend, tmp_path)
    agent = AgentProcess(env, tmp_path / "agent.log").start()
    try:
        node_id = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])["node_id"]
        copied = credential_of(env)  # what a copy of the disk holds
        backend.admin.rotate_credential(node_id)
        wait_for(lambda: not backend.admin.node(node_id)["credential_rotating"], 30, what="the rotation")
        assert status_with(backend, copied, stream=True) == 401  # the copy opens a stream: contested
        assert status_with(backend, credential_of(env)) == 401  # the real machine is refused too
        config = load_config(env)
        status = wait_for(
            lambda: (s := collect_status(config))["connection"] == "credential_rejected" and s, 30, what="the status"
        )
        assert "shared_identity" in status["last_error"] and "enroll" in status["last_error"], status
        checks = {c["name"]: c for c in doctor_checks(env)}
        assert checks["credential"]["status"] == "fail" and "shared_identity" in checks["credential"]["detail"]
        assert "on the real machine set a new enrollment token" in checks["credential"]["hint"], checks["credential"]
        agent.stop()
        env["FADEN_NODE_AGENT_ENROLLMENT_TOKEN"] = backend.mint_token()  # what the operator does
        agent = AgentProcess(env, tmp_path / "agent.log").start()
        node = wait_for(
            lambda: (n := newest_node(backend, env))["node_id"] != node_id and n["heartbeats"] and n, 30, what="a node"
        )
        assert not node["shared_identity"]
        assert status_with(backend, credential_of(env)) == 200
        assert list(Path(env["FADEN_NODE_AGENT_STATE_PATH"]).parent.glob("*.rejected-*"))
    finally:
        agent.stop()
        agent.kill()


def newest_node(backend, env: dict[str, str]) -> dict:
    return [n for n in backend.nodes() if n["agent_id"] == env["FADEN_NODE_AGENT_AGENT_ID"]][-1]


def doctor_checks(env: dict[str, str]) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-m", "faden_agent", "doctor", "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    return orjson.loads(done.stdout)["checks"]
