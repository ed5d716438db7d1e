"""A machine that shuts down says so: the real agent on a private system bus (the real
dbus-daemon) with a stand-in logind (tests/support/systembus.py) takes a delay inhibitor; on
PrepareForShutdown(true) `node.shutting_down` reaches the real reference backend, a
container's last lines (held back by a 30 s batching wait) are shipped, the outbox drains and
the inhibitor's fd is closed within InhibitDelayMaxSec; the heartbeats after it say so."""

from __future__ import annotations

import subprocess
import sys

import pytest

from faden_agent import protocol
from tests.conftest import TEST_IMAGE
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import agent_env_for, backend  # noqa: F401 - fixture
from tests.support.executorproc import prefix, remove_containers  # noqa: F401 - fixture
from tests.support.systembus import DELAY_MAX_S, system_bus  # noqa: F401 - fixture

LINES = 300


@pytest.mark.docker
def test_prepare_for_shutdown_reports_ships_and_releases_the_inhibitor(
    backend,  # noqa: F811
    system_bus,
    docker_client,
    prefix,  # noqa: F811
    tmp_path,
):
    bus, logind = system_bus
    env = agent_env_for(backend, tmp_path / "agent", log_flush_interval_sec=30)
    env["DBUS_SYSTEM_BUS_ADDRESS"] = bus.address
    agent = AgentProcess(env, tmp_path / "agent.log").start()
    agent_id = env["FADEN_NODE_AGENT_AGENT_ID"]
    node = backend.wait_node(agent_id)
    name = f"{prefix}-last"
    try:
        inhibitor = wait_for(lambda: logind.held(), 10, what="the agent's inhibitor")[0]
        assert (inhibitor.what, inhibitor.who, inhibitor.mode) == ("shutdown", "faden-agent", "delay")
        docker_client.containers.run(
            TEST_IMAGE,
            ["sh", "-c", f'for i in $(seq 1 {LINES}); do echo "last $i"; done; sleep 3600'],
            name=name,
            labels={protocol.LABEL_MANAGED: "true", protocol.LABEL_AGENT_ID: agent_id},
            detach=True,
        )
        wait_for(lambda: agent.workers()["logs"]["status"].get("backlog_lines", 0) >= LINES, 20, what="lines read")
        assert not [r for r in backend.logs(node["node_id"]) if r["line"].startswith("last ")]  # held back

        logind.prepare_for_shutdown(True)
        wait_for(lambda: logind.signals_sent, 5, what="the signal")
        announced = logind.signals_sent[0][1]
        wait_for(lambda: inhibitor.released_at, DELAY_MAX_S + 2, what="the inhibitor released")
        took = inhibitor.released_at - announced
        print(f"PrepareForShutdown(true) -> inhibitor released: {took:.2f} s (InhibitDelayMaxSec {DELAY_MAX_S:g})")
        assert took < DELAY_MAX_S
        # At the release: the event is at the backend, every line too, nothing waits in the outbox.
        events = [e for e in backend.events(node["node_id"]) if e["data"].get("type") == protocol.SHUTTING_DOWN_EVENT]
        assert len(events) == 1, events
        shipped = {r["line"] for r in backend.logs(node["node_id"])}
        assert {f"last {i}" for i in range(1, LINES + 1)} <= shipped
        stream = agent.workers()["stream"]["status"]
        assert stream["shutdown"] == "ready" and stream["outbox"]["records"] == 0, stream

        def beat_after_event() -> bool:
            return any(
                h["received_at"] > events[0]["received_at"] and (h["data"].get("connection") or {}).get("shutting_down")
                for h in backend.heartbeats(node["node_id"])
            )

        wait_for(beat_after_event, 10, what="a heartbeat that says the machine goes down")
        logind.prepare_for_shutdown(False)  # cancelled after all: the agent holds a new inhibitor
        again = wait_for(lambda: logind.held(), 5, what="the inhibitor taken again")[0]
        assert again is not inhibitor and again.mode == "delay"
        wait_for(lambda: "shutdown" not in agent.workers()["stream"]["status"], 5, what="the stream worker reset")
        agent.stop()  # systemd's SIGTERM once the inhibitor is released
        beats = backend.heartbeats(node["node_id"])
        assert events[0]["received_at"] < beats[-1]["received_at"]  # reported before the last heartbeat
    finally:
        remove_containers(docker_client, prefix)
        agent.stop()


def test_without_logind_the_agent_says_so_once_and_goes_on(backend, tmp_path):  # noqa: F811
    env = agent_env_for(backend, tmp_path / "agent")
    env["DBUS_SYSTEM_BUS_ADDRESS"] = f"unix:path={tmp_path / 'no-bus'}"
    agent = AgentProcess(env, tmp_path / "agent.log").start()
    try:
        backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"], heartbeats=2)
        assert agent.log_text().count("no logind shutdown inhibitor") == 1
        doctor = subprocess.run(
            [sys.executable, "-m", "faden_agent", "doctor"], env=env, capture_output=True, text=True, timeout=60
        )
        line = next(li for li in doctor.stdout.splitlines() if " shutdown " in li)
        assert line.startswith("warn") and "no logind on the system bus" in line, doctor.stdout
    finally:
        agent.stop()


def test_doctor_sees_logind_on_the_bus(system_bus, tmp_path):
    bus, _ = system_bus
    env = {"PATH": "/usr/bin:/bin", "DBUS_SYSTEM_BUS_ADDRESS": bus.address}
    env["FADEN_NODE_AGENT_STATE_PATH"] = str(tmp_path / "state.json")
    env["FADEN_NODE_AGENT_BACKEND_URL"] = "http://127.0.0.1:9"
    doctor = subprocess.run(
        [sys.executable, "-m", "faden_agent", "doctor"], env=env, capture_output=True, text=True, timeout=60
    )
    line = next(li for li in doctor.stdout.splitlines() if " shutdown " in li)
    assert line.startswith("ok") and f"waits up to {DELAY_MAX_S:g}s" in line, doctor.stdout
