"""Authenticated peers first, against a real agent's peer worker whose descriptor limit is 300:
twice that many connections that never show a ticket (silent, or a head begun and never
finished; from the receiver's own address and from eight others, reopened as they are
dropped) leave a receiver with a valid ticket its whole image, and the peer's metrics show
the budget and what was dropped."""

from __future__ import annotations

import errno
import resource
import select
import socket
import threading
import time
from collections import Counter

import pytest

from tests.support.agentproc import wait_for
from tests.support.backendproc import agent_on_backend, backend, free_port  # noqa: F401
from tests.support.metricsclient import get
from tests.support.peerreceiver import fetch, serve_ticket

LIMIT = 300
PARTIAL = b"POST /v1/images/fetch HTTP/1.1\r\nHost: x\r\n"


def hold(port: int, source: str, partial: bool, failures: Counter[str] | None = None) -> socket.socket | None:
    """A connection that shows no ticket (None when it could not be opened: why is counted)."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
        if partial:
            sock.sendall(PARTIAL)
        return sock
    except OSError as exc:
        if failures is not None:
            failures[errno.errorcode.get(exc.errno or 0, type(exc).__name__)] += 1
        return None


@pytest.fixture
def own_descriptors():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8 * LIMIT)), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.docker
def test_twice_the_descriptor_limit_without_tickets_leaves_a_ticket_holder_served(
    agent_on_backend, backend, docker_client, own_descriptors
):
    port = free_port()
    agent, node = agent_on_backend(advertise_host="127.0.0.1", peer_port=port, metrics_addr=f"127.0.0.1:{free_port()}")
    wait_for(lambda: agent.workers()["peer"]["status"].get("listening"), 20, what="the peer port")
    pid = agent.workers()["peer"]["pid"]
    _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (LIMIT, hard))
    image_id = docker_client.images.get("faden-test/busybox:1").id
    tickets = [f"holder-{n}-" + "h" * 24 for n in range(3)]
    for ticket in tickets:
        serve_ticket(backend, node["node_id"], image_id, ticket)

    held = [hold(port, "127.0.0.1", n % 2 == 1) for n in range(LIMIT)]  # the receiver's own address
    stop = threading.Event()
    opened = [0]  # connections the flood opened; those it could not open are counted by why
    failures: Counter[str] = Counter()

    def flood() -> None:  # eight more addresses, LIMIT connections kept open, reopened as dropped
        # Only a connection the server ended is replaced: a flood that closed its own oldest ones
        # outran a peer worker starved of CPU (a loaded CI machine), which then accepted them
        # closed already, and nothing was over a budget.
        mine: list[socket.socket] = []
        attempt = 0
        while not stop.is_set():
            if len(mine) < LIMIT:
                sock = hold(port, f"127.0.0.{2 + attempt % 8}", attempt % 2 == 1, failures)
                attempt += 1
                if sock is not None:
                    opened[0] += 1
                    mine.append(sock)
                continue
            ended, _, _ = select.select(mine, [], [], 0.05)  # readable: the server's end (or answer)
            for sock in ended:
                mine.remove(sock)
                sock.close()
        for sock in mine:
            sock.close()

    flooding = threading.Thread(target=flood, daemon=True)
    flooding.start()
    try:
        # opened, not tried: a connect refused for a moment (a loaded machine) must not pass for a flood
        wait_for(lambda: opened[0] > LIMIT, 30, what=lambda: f"{LIMIT} more connections (not opened: {failures})")
        results = [fetch(f"http://127.0.0.1:{port}", image_id, ticket) for ticket in tickets]
        during = opened[0]
        served_at = time.monotonic()
    finally:
        stop.set()
        flooding.join(10)
    # the status as of a report sent after the fetches, which came after the flood's first LIMIT
    connections = agent.row_sent_after("peer", served_at)["status"]["connections"]
    scrape = get(agent)
    for sock in held:
        if sock is not None:
            sock.close()
    print(
        f"{LIMIT} held + {during} opened from 8 addresses ({dict(failures)} not) at a limit of {LIMIT}: "
        f"{[(round(h, 3), round(t, 3), size) for h, t, size in results]}; {connections}"
    )
    assert all(size > 1 << 20 for _, _, size in results)  # each a whole busybox archive
    assert connections["budget"] == {"total": 86, "per_address": 21}
    assert connections["waiting"] <= 86
    dropped = connections["dropped"]
    assert dropped["address_budget"] + dropped["budget"] >= LIMIT
    assert dropped["budget"] > 0  # the eight other addresses, past the total
    assert scrape.value("faden_agent_peer_unauthenticated_budget", scope="total") == 86
    assert scrape.value("faden_agent_peer_unauthenticated_budget", scope="per_address") == 21
    assert scrape.value("faden_agent_peer_connections_dropped_total", reason="address_budget") >= LIMIT // 2
    row = agent.workers()["peer"]
    assert row["pid"] == pid and row["state"] == "RUNNING"
