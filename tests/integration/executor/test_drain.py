"""Drain and cordon end to end: `faden-agent drain|cordon|uncordon` on the host, a host request
over the real agent's link, the real reference backend's node.* command, the real Docker
engine and a real Loki: every line each drained container printed arrives, the one that
ignores SIGTERM is stopped hard within the deadline and named; a cordon outlives restarts."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from faden_agent import protocol
from faden_agent.devbackend.admin import AdminError
from tests.conftest import TEST_IMAGE
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import BackendProcess, agent_env_for, backend  # noqa: F401 - fixture
from tests.support.executorproc import prefix, remove_containers  # noqa: F401 - fixture
from tests.support.lokiproc import loki_3  # noqa: F401

# Each prints numbered lines to stdout and to /c/<name> (what Loki must hold); `polite` ends
# on SIGTERM after a last line, `stubborn` ignores it.
# stdout first, then the file: a line in the file was printed (a kill between the two
# writes leaves a printed line out of the file, never the other way round).
LOOP = 'i=0; while true; do i=$((i+1)); echo "$N line $i"; echo "$N line $i" >> /c/$N; sleep 0.02; done'
POLITE = 'trap "echo $N bye; echo $N bye >> /c/$N; exit 0" TERM; ' + LOOP
STUBBORN = 'trap "" TERM; ' + LOOP
DRAIN_DEADLINE_S = 8.0


def cli(env: dict[str, str], *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "faden_agent", *args], env=env, capture_output=True, text=True, timeout=timeout_s
    )


def start_agent(backend: BackendProcess, root: Path, **overrides: Any) -> tuple[AgentProcess, dict[str, str]]:
    root.mkdir(exist_ok=True)
    env = agent_env_for(backend, root, **overrides)
    agent = AgentProcess(env, root / "agent.log").start()
    return agent, env


def drain_state(backend: BackendProcess, node_id: str) -> str | None:
    return (backend.admin.node(node_id).get("drain") or {}).get("state")


@pytest.mark.docker
def test_a_drain_of_three_ends_in_its_deadline_with_every_line_and_the_stubborn_one_named(
    backend,  # noqa: F811
    loki_3,  # noqa: F811
    docker_client,
    prefix,  # noqa: F811
    tmp_path,
):
    agent, env = start_agent(backend, tmp_path / "agent", loki_url=loki_3.url, log_flush_interval_sec=0.2)
    agent_id = env["FADEN_NODE_AGENT_AGENT_ID"]
    node = backend.wait_node(agent_id)
    printed = tmp_path / "printed"
    printed.mkdir(mode=0o777)
    names = {f"{prefix}-a": POLITE, f"{prefix}-b": POLITE, f"{prefix}-c": STUBBORN}
    try:
        for name, script in names.items():
            docker_client.containers.run(
                TEST_IMAGE,
                ["sh", "-c", script],
                name=name,
                environment={"N": name},
                labels={protocol.LABEL_MANAGED: "true", protocol.LABEL_AGENT_ID: agent_id},
                volumes={str(printed): {"bind": "/c", "mode": "rw"}},
                detach=True,
            )
        # Managed by another agent on the same engine (no agent-id label of ours): never touched.
        other = docker_client.containers.run(
            TEST_IMAGE, ["sleep", "300"], name=f"{prefix}-other", labels={protocol.LABEL_MANAGED: "true"}, detach=True
        )
        wait_for(lambda: all((printed / n).exists() and (printed / n).stat().st_size > 500 for n in names), 30)
        started = time.monotonic()
        done = cli(env, "drain", "--deadline", f"{DRAIN_DEADLINE_S:g}s")
        took = time.monotonic() - started
        assert done.returncode == 0, (done.stdout, done.stderr, agent.log_text()[-3000:])
        print(f"faden-agent drain of 3 containers (deadline {DRAIN_DEADLINE_S:g} s): {took:.2f} s\n{done.stdout}")
        assert f"stopped hard at the deadline: {prefix}-c" in done.stdout
        assert f"{prefix}-c: hard_stopped" in done.stdout and f"{prefix}-a: exited" in done.stdout
        assert [c.name for c in docker_client.containers.list(all=True, filters={"name": prefix})] == [other.name]
        assert other.name not in done.stdout
        for name in names:  # at once: each was removed only after Loki accepted its lines
            got = set(loki_3.lines(f'{{agent_id="{agent_id}", container="{name}"}}'))
            want = (printed / name).read_text().splitlines()
            missing = [line for line in want if line not in got]
            assert missing == [], (name, len(want), missing[-3:])
            assert (f"{name} bye" in got) == (names[name] == POLITE)
        wait_for(lambda: drain_state(backend, node["node_id"]) == protocol.DRAINED, 10, what="drained at the backend")
        command = backend.command(f"host-{command_request_id(done.stdout)}")
        phases = [(r.get("container"), r.get("phase")) for r in command["timeline"] if r["state"] == "progress"]
        for name in names:  # progress per container in the timeline
            assert (name, "removed") in phases
        assert command["timeline"][-1]["result"]["hard_stopped"] == [f"{prefix}-c"]
        ran = command["timeline"][-1]["ts"] - command["timeline"][0]["ts"]  # received -> succeeded, agent's clock
        print(f"node.drain: {ran:.2f} s from received to succeeded")
        assert ran < DRAIN_DEADLINE_S
    finally:
        remove_containers(docker_client, prefix)
        agent.stop()


def command_request_id(output: str) -> str:
    return output.split("(request ", 1)[1].split(")", 1)[0]


def test_a_cordon_outlives_agent_and_backend_restarts_and_uncordon_ends_it(backend, tmp_path):  # noqa: F811
    agent, env = start_agent(backend, tmp_path / "agent")
    node = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])
    try:
        done = cli(env, "cordon")
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert "cordoned" in done.stdout
        wait_for(lambda: drain_state(backend, node["node_id"]) == protocol.CORDONED, 10, what="cordoned")
        assert "drain:         cordoned since" in cli(env, "status").stdout
        with pytest.raises(AdminError, match="cordoned"):  # the backend places nothing there
            backend.send_command(node["node_id"], "container.run", {"name": "x", "image": TEST_IMAGE})

        assert protocol.DRAIN_CAPABILITY in backend.admin.node(node["node_id"])["capabilities"]
        before = {h["data"]["pid"] for h in backend.heartbeats(node["node_id"]) if h["data"].get("pid")}
        agent.stop()
        agent.start()

        def detail_of_the_new_agent() -> dict[str, Any] | None:
            beats = backend.heartbeats(node["node_id"])
            return next((h for h in beats if h["data"].get("pid") and h["data"]["pid"] not in before), None)

        beat = wait_for(detail_of_the_new_agent, 20, what="the first detailed beat after the restart")
        assert beat["data"]["drain"]["state"] == protocol.CORDONED, beat

        backend.restart()
        assert drain_state(backend, node["node_id"]) == protocol.CORDONED  # kept by the backend itself
        backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"], heartbeats=2)
        assert drain_state(backend, node["node_id"]) == protocol.CORDONED

        done = cli(env, "uncordon")
        assert done.returncode == 0, (done.stdout, done.stderr)
        wait_for(lambda: drain_state(backend, node["node_id"]) == protocol.SCHEDULABLE, 10, what="schedulable")
    finally:
        agent.stop()


def test_without_the_backend_drain_fails_with_the_reason_and_cordon_waits_for_the_link(backend, tmp_path):  # noqa: F811
    agent, env = start_agent(backend, tmp_path / "agent")
    node = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])
    try:
        backend.stop()
        drained = cli(env, "drain", "--deadline", "30s", "--wait", "2s")
        assert drained.returncode == 4, (drained.stdout, drained.stderr)
        assert "no answer from the backend within 2s" in drained.stderr and "expires" in drained.stderr
        assert "the link to the backend is not up" in drained.stdout

        done = cli(env, "cordon", "--wait", "1s")
        assert done.returncode == 4, (done.stdout, done.stderr)
        assert "sent when the link is back" in done.stderr
        time.sleep(2.5)  # the drain request expires at the backend meanwhile
        backend.start()
        wait_for(lambda: drain_state(backend, node["node_id"]) == protocol.CORDONED, 20, what="the queued cordon")
        with pytest.raises(AdminError, match="no command"):  # the expired drain got no answer
            backend.command(f"host-{command_request_id(drained.stdout)}")
        assert drain_state(backend, node["node_id"]) == protocol.CORDONED
    finally:
        agent.stop()


def test_drain_refuses_a_bad_deadline_with_one_line(tmp_path):
    done = cli(
        {"PATH": "/usr/bin:/bin", "FADEN_NODE_AGENT_STATE_PATH": str(tmp_path / "s.json")},
        "drain",
        "--deadline",
        "soon",
    )
    assert done.returncode == 2
    assert "'soon' is no duration" in done.stderr


def test_a_drain_that_fails_exits_1_with_the_reason(backend, tmp_path):  # noqa: F811
    agent, env = start_agent(backend, tmp_path / "agent", docker_host=f"unix://{tmp_path / 'no-engine.sock'}")
    node = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])
    try:
        done = cli(env, "drain", "--deadline", "10s")
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert "failed (docker_unavailable)" in done.stderr, done.stderr
        # cordoned all the same: nothing new goes to a machine whose drain failed
        wait_for(lambda: drain_state(backend, node["node_id"]) == protocol.CORDONED, 10, what="cordoned")
    finally:
        agent.stop()


def test_an_outbox_that_cannot_be_written_is_one_line(tmp_path):
    state = tmp_path / "state"
    (state / "outbox.sqlite").mkdir(parents=True)  # not a database: the request cannot be queued
    (state / "state.json").write_text("{}")
    env = {"PATH": "/usr/bin:/bin", "FADEN_NODE_AGENT_STATE_PATH": str(state / "state.json")}
    env["FADEN_NODE_AGENT_RUNTIME_DIR"] = str(tmp_path / "run")
    done = cli(env, "cordon", "--wait", "1s")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "cannot write the agent's outbox" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
