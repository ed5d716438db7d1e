"""httpserve over real sockets on loopback: keep-alive and pipelined requests, per-route
body bounds checked before the handler runs, heads and bodies under their deadlines, the
oldest waiting connection closed past the cap."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from faden_agent.http.serve.server import BoundedHandler, BoundedServer, RouteLimits, ServerLimits


class Echo(BoundedHandler):
    seen: list[str]

    def do_POST(self) -> None:
        body = self.rfile.read(self.body_length) if self.body_length > 0 else b""
        self.seen.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def routes(method: str, path: str) -> RouteLimits:
    if path == "/slow-head":
        return RouteLimits(head_s=0.3, body_bytes=100, body_s=0.5)
    return RouteLimits(head_s=5.0, body_bytes=100, body_s=0.5)


@pytest.fixture
def server() -> Iterator[BoundedServer]:
    handler = type("H", (Echo,), {"seen": []})
    limits = ServerLimits(workers=2, backlog=4, max_waiting=20, first_line_s=5.0, idle_s=5.0, keepalive_s=5.0)
    httpd = BoundedServer(("127.0.0.1", 0), handler, limits=limits, routes=routes)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def connect(server: BoundedServer) -> socket.socket:
    return socket.create_connection(server.server_address[:2], timeout=5)


def read_answers(sock: socket.socket, count: int) -> list[bytes]:
    data = b""
    answers: list[bytes] = []
    while len(answers) < count:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
        while b"\r\n\r\n" in data:
            head, _, rest = data.partition(b"\r\n\r\n")
            length = int(
                next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
            )
            if len(rest) < length:
                break
            answers.append(head.split(b"\r\n")[0] + b" " + rest[:length])
            data = rest[length:]
    return answers


def post(path: str, body: bytes) -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


def test_kept_alive_and_pipelined_requests_are_answered_in_order(server):
    with connect(server) as sock:
        sock.sendall(post("/a", b"one"))
        assert read_answers(sock, 1) == [b"HTTP/1.1 200 OK one"]
        sock.sendall(post("/b", b"two") + post("/c", b"three"))  # two heads in one segment
        assert read_answers(sock, 2) == [b"HTTP/1.1 200 OK two", b"HTTP/1.1 200 OK three"]
    assert server.RequestHandlerClass.seen == ["/a", "/b", "/c"]


def test_a_body_over_the_routes_bound_or_chunked_is_refused_before_the_handler(server):
    with connect(server) as sock:
        sock.sendall(b"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 413")
    with connect(server) as sock:
        sock.sendall(b"POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 411")
    assert server.RequestHandlerClass.seen == []


def test_expect_100_continue_is_answered_only_for_a_body_within_bounds(server):
    expect = "POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n"
    with connect(server) as sock:
        sock.sendall(expect.format(101).encode())
        assert sock.recv(4096).startswith(b"HTTP/1.1 413")  # no "100 Continue" first: the body stays unsent
    with connect(server) as sock:
        sock.sendall(expect.format(3).encode())
        assert sock.recv(4096) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b"abc")
        assert read_answers(sock, 1) == [b"HTTP/1.1 200 OK abc"]
    assert server.RequestHandlerClass.seen == ["/e"]


def test_an_unfinished_head_and_a_slow_body_are_cut_at_their_bounds(server):
    with connect(server) as head:
        head.sendall(b"POST /slow-head HTTP/1.1\r\nHost: x\r\n")  # the route gives its head 0.3 s
        assert head.recv(4096) == b""  # closed by the server, long before the 5 s socket timeout
    with connect(server) as body:
        body.sendall(b"POST /drip HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\nab")  # 0.5 s for 50 bytes
        assert body.recv(4096) == b""
    assert server.RequestHandlerClass.seen == []
    assert server.status()["dropped"]["timed_out"] == 1


def test_past_the_cap_the_oldest_waiting_connection_is_closed(server):
    waiting = [connect(server) for _ in range(20)]
    newest = connect(server)  # the 21st: the first one goes (past its address's share already)
    assert waiting[0].recv(1) == b""
    newest.sendall(post("/new", b"ok"))
    assert read_answers(newest, 1) == [b"HTTP/1.1 200 OK ok"]
    dropped = server.status()["dropped"]
    assert dropped["address_budget"] + dropped["budget"] >= 1
    for sock in [*waiting, newest]:
        sock.close()
