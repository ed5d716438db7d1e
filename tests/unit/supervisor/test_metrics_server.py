"""The metrics endpoint's HTTP server turned by a real poll loop, against real sockets: a
request answered in its first wake-up never reaches the poller; a slow client and a reply
larger than the socket's buffer are served through it, and it forgets each one at the end."""

from __future__ import annotations

import http.client
import select
import socket
import threading
import time

from faden_agent.supervisor.metrics.server import HttpServer


class Loop:
    """The owner's poller, as the supervisor's: watch() registers, modifies, forgets."""

    def __init__(self) -> None:
        self.poller = select.poll()
        self.watched: dict[int, int] = {}
        self.calls = 0

    def watch(self, fd: int, readable: bool, writable: bool) -> None:
        self.calls += 1
        flags = (select.POLLIN if readable else 0) | (select.POLLOUT if writable else 0)
        if flags:
            self.poller.register(fd, flags)
            self.watched[fd] = flags
        else:
            self.poller.unregister(fd)
            del self.watched[fd]

    def run_until(self, server: HttpServer, done: threading.Event) -> None:
        deadline = time.monotonic() + 10
        while not done.is_set() and time.monotonic() < deadline:
            server.serve({fd for fd, _ in self.poller.poll(20)})


def serve(body: bytes, client) -> tuple[Loop, HttpServer, list]:
    loop = Loop()
    server = HttpServer.bind("127.0.0.1", 0, lambda method, path, headers: (200, "text/plain", body), loop.watch)
    result: list = []
    done = threading.Event()

    def run_client() -> None:
        try:
            result.append(client(server.sock.getsockname()[1]))
        finally:
            done.set()

    thread = threading.Thread(target=run_client)
    thread.start()
    loop.run_until(server, done)
    thread.join()
    server.serve(set())
    return loop, server, result


def http_get(port: int) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    body = conn.getresponse().read()
    conn.close()
    return body


def test_a_request_answered_in_its_first_wake_up_never_reaches_the_poller():
    loop, server, result = serve(b"ok\n", http_get)
    assert result == [b"ok\n"]
    assert loop.calls == 1 and loop.watched == {server.sock.fileno(): select.POLLIN}  # the listener's only
    assert not server.connections
    server.close()


def test_a_slow_client_and_a_reply_larger_than_the_buffer_go_through_the_poller():
    big = bytes(range(256)) * 16384  # 4 MiB: more than one send() takes

    def slow_get(port: int) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            time.sleep(0.3)  # the server accepts (TCP_DEFER_ACCEPT: data is there) and waits
            sock.sendall(b"\r\n")
            time.sleep(0.3)  # the reply fills the buffers before the client reads
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)

    loop, server, result = serve(big, slow_get)
    head, _, body = result[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and body == big
    assert loop.calls >= 3  # watched to read the rest of the head, then to write the rest
    assert loop.watched == {server.sock.fileno(): select.POLLIN} and not server.connections
    server.close()
