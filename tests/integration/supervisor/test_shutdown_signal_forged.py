"""Only logind can announce a shutdown: on a private system bus (the real dbus-daemon) with a
stand-in logind, another connection's PrepareForShutdown(true), unicast to the agent or
broadcast on logind's path and interface, is ignored (the inhibitor kept, nothing reported);
logind's own broadcast still releases it after the report."""

from __future__ import annotations

import time

from faden_agent import protocol
from faden_agent.ipc import dbuswire as wire
from faden_agent.ipc.dbusconn import BUS_NAME, BUS_PATH, Bus
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import agent_env_for, backend  # noqa: F401 - fixture
from tests.support.systembus import DELAY_MAX_S, LOGIND_PATH, MANAGER, system_bus  # noqa: F401 - fixture


def unique_name_of(bus: Bus, pid: int) -> str:
    """The bus connection a process holds (the bus daemon knows each one's pid)."""
    for name in bus.call(BUS_NAME, BUS_PATH, BUS_NAME, "ListNames").body[0]:
        if name.startswith(":"):
            owner = bus.call(BUS_NAME, BUS_PATH, BUS_NAME, "GetConnectionUnixProcessID", "s", [name])
            if owner.body[0] == pid:
                return name
    raise AssertionError(f"no bus connection of pid {pid}")


def forged(bus: Bus, destination: str | None) -> None:
    fields = {wire.PATH: LOGIND_PATH, wire.INTERFACE: MANAGER, wire.MEMBER: "PrepareForShutdown", wire.SIGNATURE: "b"}
    if destination:
        fields[wire.DESTINATION] = destination
    bus.send(wire.Message(wire.SIGNAL, fields=fields, body=[True]))


def shutdown_events(backend, node_id: str) -> list[dict]:
    return [e for e in backend.events(node_id) if e["data"].get("type") == protocol.SHUTTING_DOWN_EVENT]


def test_a_forged_prepare_for_shutdown_is_ignored_and_logind_s_own_still_works(backend, system_bus, tmp_path):  # noqa: F811
    bus, logind = system_bus
    env = agent_env_for(backend, tmp_path / "agent")
    env["DBUS_SYSTEM_BUS_ADDRESS"] = bus.address
    agent = AgentProcess(env, tmp_path / "agent.log").start()
    attacker = Bus(bus.address)
    try:
        node_id = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])["node_id"]
        inhibitor = wait_for(lambda: logind.held(), 10, what="the agent's inhibitor")[0]
        forged(attacker, unique_name_of(attacker, agent.pid))  # unicast, as any local user may
        forged(attacker, None)  # broadcast from a connection that is not logind (the match rule keeps it out)
        wait_for(lambda: "ignored a PrepareForShutdown" in agent.log_text(), 10, what="the unicast one ignored")
        time.sleep(1.0)
        assert inhibitor.released_at is None and logind.held() == [inhibitor]
        assert "shutdown" not in agent.workers()["stream"]["status"]
        assert not shutdown_events(backend, node_id)
        logind.prepare_for_shutdown(True)  # the real one
        wait_for(lambda: inhibitor.released_at, DELAY_MAX_S + 2, what="the inhibitor released")
        assert len(shutdown_events(backend, node_id)) == 1
    finally:
        attacker.close()
        agent.stop()
