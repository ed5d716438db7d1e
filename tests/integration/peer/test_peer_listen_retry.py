"""The peer worker's listening socket: a port that cannot be bound is retried every
tick and reported, a setting no retry can fix is reported and left alone; the real
supervisor with only the peer worker, its status read over the real control socket."""

from __future__ import annotations

import socket
import time

from faden_agent.workers.peer.worker import PeerWorker
from tests.support.agentproc import AgentProcess, agent_env, wait_for
from tests.support.sampleworkers import supervisor_argv

PEER_ONLY = supervisor_argv({"peer": "faden_agent.workers.peer.worker:PeerWorker"})


def peer_status(agent: AgentProcess) -> dict:
    return agent.workers()["peer"].get("status") or {}


def test_a_taken_port_is_retried_until_free_and_a_missing_certificate_is_not(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    env = agent_env(tmp_path / "a", advertise_host="127.0.0.1", peer_port=port)
    agent = AgentProcess(env, tmp_path / "a.log", argv=PEER_ONLY).start()
    try:
        status = wait_for(lambda: peer_status(agent).get("error"), 10, what="the peer worker's listen error")
        assert "cannot listen" in status and not peer_status(agent)["listening"]
        taken.close()
        wait_for(lambda: peer_status(agent).get("listening"), 15, what="listening once the port is free")
        assert peer_status(agent)["error"] is None and agent.workers()["peer"]["restarts"] == 0
    finally:
        taken.close()
        agent.stop()

    env = agent_env(tmp_path / "b", advertise_host="127.0.0.1", peer_port=port, advertise_scheme="https")
    agent = AgentProcess(env, tmp_path / "b.log", argv=PEER_ONLY).start()
    try:
        wait_for(lambda: peer_status(agent).get("error"), 10, what="the peer worker's configuration error")
        time.sleep(PeerWorker.tick_interval_s + 1)  # a tick later: the port is free, yet no listening without a key
        status = peer_status(agent)
        assert "PEER_CERT_FILE" in status["error"] and not status["listening"], status
    finally:
        agent.stop()
