"""The waiting connections' budget of the peer port's server (http/serve/acceptor.py), on real
loopback sockets from several source addresses: half the descriptors left under the limit,
a quarter of that per address, the least recently active dropped first, and out of
descriptors an idle connection gives way to the newest, which then shows its request."""

from __future__ import annotations

import json
import resource
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from faden_agent.http.serve.acceptor import Acceptor, budget_for
from faden_agent.http.serve.conn import Conn
from faden_agent.http.serve.server import BoundedHandler, BoundedServer, ServerLimits
from tests.support.peerclose import closed_by_peer


class Hello(BoundedHandler):
    def do_POST(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


REPO = Path(__file__).resolve().parents[3]
REQUEST = b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"


def serving() -> tuple[BoundedServer, threading.Thread]:
    limits = ServerLimits(workers=2, backlog=4, max_waiting=40, first_line_s=30.0, idle_s=5.0, keepalive_s=5.0)
    httpd = BoundedServer(("127.0.0.1", 0), Hello, limits=limits)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    return httpd, thread


@pytest.fixture
def server() -> Iterator[BoundedServer]:
    httpd, thread = serving()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def connect(server: BoundedServer, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(server.server_address[:2], timeout=5, source_address=(source, 0))


def answered(sock: socket.socket) -> bool:
    sock.sendall(REQUEST)
    return sock.recv(4096).startswith(b"HTTP/1.1 200")


def settle(server: BoundedServer, waiting: int) -> None:
    deadline = time.monotonic() + 5
    while server.status()["waiting"] != waiting and time.monotonic() < deadline:
        time.sleep(0.02)


def test_the_budget_is_half_what_the_limit_leaves_and_a_quarter_per_address():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (300, hard))
        budget = budget_for(4096, 64 + 2 * 16 + 32)
        assert (budget.total, budget.per_address) == (86, 21)  # the peer port's at a limit of 300
        resource.setrlimit(resource.RLIMIT_NOFILE, (100, hard))
        assert budget_for(4096, 128).total == 16  # never below the floor
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert budget_for(4096, 128).total == min(4096, (soft - 128) // 2) or soft == resource.RLIM_INFINITY


def test_one_address_holds_at_most_its_share_and_others_keep_theirs(server):
    assert server.status()["budget"] == {"total": 40, "per_address": 10}
    others = [connect(server, "127.0.0.2") for _ in range(8)]
    flood = [connect(server, "127.0.0.3") for _ in range(30)]
    settle(server, 18)
    assert server.status()["waiting"] == 18  # 8 + that address's 10
    assert all(closed_by_peer(sock) for sock in flood[:20]) and not any(closed_by_peer(sock) for sock in flood[20:21])
    assert not any(closed_by_peer(sock) for sock in others[:1])
    assert all(answered(sock) for sock in others)  # the other address lost none
    assert server.status()["dropped"]["address_budget"] == 20
    for sock in others + flood:
        sock.close()


def test_past_the_total_the_least_recently_active_goes_first(server):
    socks = [connect(server, f"127.0.0.{10 + n // 8}") for n in range(40)]  # five addresses, 8 each
    settle(server, 40)
    socks[0].sendall(b"POST /x HTTP/1.1\r\n")  # the oldest shows life: now the last to go
    time.sleep(0.2)
    newest = connect(server, "127.0.1.1")
    settle(server, 40)
    assert closed_by_peer(socks[1]) and not closed_by_peer(socks[2])
    socks[0].sendall(b"Host: x\r\nContent-Length: 0\r\n\r\n")
    assert socks[0].recv(4096).startswith(b"HTTP/1.1 200")
    assert answered(newest)
    assert server.status()["dropped"]["budget"] == 1
    for sock in [*socks, newest]:
        sock.close()


# In a fresh interpreter: the test takes every free descriptor number but one, and a thread
# of an earlier test in the same process closing a socket meanwhile would leave the server one
# more (seen once in a loaded CI run: no connection had to give way).
OUT_OF_DESCRIPTORS = """
import json, os, resource
from tests.support.peerclose import closed_by_peer
from tests.unit.peer.test_waiting_budget import answered, connect, serving, settle

server, _ = serving()
idle = [connect(server, "127.0.0.2") for _ in range(6)] + [connect(server, "127.0.0.3") for _ in range(6)]
settle(server, 12)
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
top = max(int(fd) for fd in os.listdir("/proc/self/fd"))
fillers = []  # every free number below the top taken: the next descriptor is top + 1
while not fillers or fillers[-1] < top:
    fillers.append(os.open(os.devnull, os.O_RDONLY))
os.close(fillers.pop())
resource.setrlimit(resource.RLIMIT_NOFILE, (max(fillers + [top]) + 2, hard))  # one left: the client's
honest = connect(server, "127.0.0.4")
print(json.dumps({
    "answered": answered(honest),
    "dropped": server.status()["dropped"],
    "oldest_closed": closed_by_peer(idle[0]),
}))
"""


def test_out_of_descriptors_an_idle_connection_gives_way_to_the_newest():
    """The limit drops under the server while it holds idle connections (their budget was made
    for the old limit): a new connection is accepted in place of the oldest idle one, not refused."""
    out = subprocess.run(
        [sys.executable, "-c", OUT_OF_DESCRIPTORS], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    assert got["answered"], got
    assert got["dropped"]["out_of_descriptors"] >= 1 and got["dropped"]["refused"] == 0, got
    assert got["oldest_closed"], got  # the oldest idle one


def test_a_flood_accepted_in_batches_cannot_push_out_a_connection_before_its_head_is_read():
    """A connection that sends its head a moment after it is accepted, with a flood from ten
    addresses queued behind it past the whole budget: one batch takes a quarter of the budget
    (not the whole backlog, which would drop it unread), and the next wake-up reads its head
    before it takes more."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=128)
    handed: list[Conn] = []
    acceptor = Acceptor(
        listener,
        None,
        max_waiting=16,
        reserved=0,
        head_s=lambda line: 30.0,
        first_line_s=30.0,
        keepalive_s=5.0,
        idle_s=5.0,
        max_head=8192,
        hand_off=handed.append,
    )
    port = listener.getsockname()[1]
    honest = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=("127.0.0.2", 0))
    flood = [
        socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(f"127.0.0.{3 + n % 10}", 0))
        for n in range(40)
    ]
    listener.setblocking(False)
    acceptor.selector.register(listener, selectors.EVENT_READ, "listener")
    try:
        acceptor._accept()
        assert (acceptor.budget.total, acceptor.accepted) == (16, 4)
        assert "127.0.0.2" in acceptor.by_address  # taken, and not yet dropped
        honest.sendall(REQUEST)
        for _ in range(20):
            acceptor._round(0.5)
        assert [conn.address[0] for conn in handed] == ["127.0.0.2"]
        assert acceptor.accepted == 41 and acceptor.dropped["budget"] == 41 - 16 - 1
    finally:
        for sock in [honest, *flood, *(conn.sock for conn in handed)]:
            sock.close()
        for waiting in list(acceptor.waiting.values()):
            acceptor._drop(waiting)
        acceptor.selector.close()
        listener.close()
