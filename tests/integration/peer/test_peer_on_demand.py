"""The peer worker starts on demand (supervisor/peer_demand.py): not at all on a
machine that serves no peers; at once, and listening before the command is answered, when
the backend asks it to serve; when the backend puts the machine in a cluster. Once started
it is a worker like the others: a crash restarts it."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from faden_agent import protocol
from faden_agent.transfers.server import PeerServer
from faden_agent.transfers.tickets import TicketBox
from tests.support.agentproc import wait_for
from tests.support.backendproc import agent_on_backend, backend, free_port  # noqa: F401
from tests.support.executorproc import executor_factory  # noqa: F401

IMAGE_ID = "sha256:" + "ab" * 32


def peer_row(agent) -> dict:
    return agent.workers()["peer"]


def listens(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_not_started_until_asked_to_serve_then_listening_and_restarted_after_a_crash(agent_on_backend, backend):
    port = free_port()
    agent, node = agent_on_backend(peer_start="on_demand", advertise_host="127.0.0.1", peer_port=port)
    row = peer_row(agent)
    assert row["state"] == "STOPPED" and row["pid"] is None and row["status"]["on_demand"]
    assert not listens(port)
    ps = subprocess.run(
        [sys.executable, "-m", "faden_agent", "ps"], env=agent.env, capture_output=True, text=True, timeout=30
    )
    assert ps.returncode == 0, ps.stdout + ps.stderr  # dormant on purpose: not a failure

    spec = {
        "image_id": IMAGE_ID,
        "receiver": "127.0.0.1",
        "ttl_s": 60,
        "ticket_sha256": hashlib.sha256(b"a ticket of the test").hexdigest(),
    }
    done = backend.wait_command(backend.send_command(node["node_id"], "image.serve", spec), timeout_s=30)
    assert done["state"] == protocol.SUCCEEDED, done
    assert listens(port)  # before the backend heard `succeeded`: no receiver finds it closed
    row = peer_row(agent)
    assert row["state"] == "RUNNING" and row["status"]["listening"]

    os.kill(row["pid"], signal.SIGKILL)
    wait_for(
        lambda: (r := peer_row(agent))["pid"] not in (None, row["pid"]) and r["state"] == "RUNNING",
        20,
        what="the peer worker restarted after kill -9",
    )
    wait_for(lambda: listens(port), 10, what="the port again")


def test_started_when_the_backend_puts_the_machine_in_a_cluster(agent_on_backend, backend):
    port = free_port()
    agent, node = agent_on_backend(peer_start="on_demand", advertise_host="127.0.0.1", peer_port=port)
    assert peer_row(agent)["state"] == "STOPPED"
    backend.admin.set_cluster("c-on-demand", [node["node_id"]])
    wait_for(lambda: peer_row(agent)["state"] == "RUNNING", 20, what="the peer worker started for the cluster")
    wait_for(lambda: listens(port), 10, what="the peer port")


def test_an_idle_peer_server_sleeps_and_stops_at_once(tmp_path):
    """Its HTTP server waits for a connection, not on a 0.5 s timer; shutdown() wakes it."""
    server = PeerServer("127.0.0.1", 0, TicketBox(tmp_path), lambda: None)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()

    def switches() -> int:
        text = Path(f"/proc/self/task/{thread.native_id}/status").read_text()
        return int(next(line for line in text.splitlines() if line.startswith("voluntary_ctxt_switches")).split()[1])

    time.sleep(0.5)
    before = switches()
    time.sleep(3.0)
    assert switches() - before <= 2  # the 0.5 s poll: 6
    assert listens(server.port)
    server.shutdown()
    thread.join(5)
    assert not thread.is_alive()  # woken by the shutdown, not by its 30 s safety poll
    assert not listens(server.port)


def test_a_supervisor_without_a_peer_worker_answers_serve_at_once_and_the_executor_lives(executor_factory):
    """A supervisor running the executor alone (no peer worker) answers the start request
    with an error: the executor must not then wait for a port that never listens, with its
    loop (and its liveness messages) stopped past the hang timeout."""
    agent, ex = executor_factory(peer_start="on_demand")
    spec = {
        "image_id": IMAGE_ID,
        "receiver": "127.0.0.1",
        "ttl_s": 60,
        "ticket_sha256": hashlib.sha256(b"another ticket").hexdigest(),
    }
    for n in range(3):
        done = ex.run(f"serve-{n}", "image.serve", spec, timeout_s=30)
        assert done["state"] == protocol.SUCCEEDED, done
    worker = agent.workers()["executor"]
    assert worker["state"] == "RUNNING" and worker["restarts"] == 0, worker
