"""BoundedServer: the listening socket, the Acceptor's thread, and a pool of at most
`workers` threads that answer complete request heads with a BaseHTTPRequestHandler
subclass of BoundedHandler; one request per hand-off, a kept-alive connection goes back to
the acceptor. Per route (RouteLimits): head time, body bytes and time, chunked or not."""

from __future__ import annotations

import logging
import math
import queue
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING

from faden_agent.http.serve.acceptor import Acceptor
from faden_agent.http.serve.conn import Conn

if TYPE_CHECKING:
    from faden_agent.protocol.status import HttpServerStatus

log = logging.getLogger(__name__)

_BUSY_BODY = b'{"reason": "peer_busy", "error": "busy", "message": "every worker is busy"}'
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)
FD_HEADROOM = 64  # descriptors kept for the workers' own files and sockets
STOP_WAIT_S = 2.0


@dataclass(frozen=True)
class RouteLimits:
    head_s: float = 10.0  # from the connection's start to the end of its head
    body_bytes: int | None = 1 << 20  # None: the handler bounds it (a chunked stream)
    body_s: float = 30.0  # from the end of the head until the handler is done reading
    chunked: bool = False


@dataclass(frozen=True)
class ServerLimits:
    workers: int = 16
    backlog: int = 64  # complete heads waiting for a worker; past it: 503 at once
    max_waiting: int = 4096  # connections without a complete head, at most (acceptor.budget_for)
    max_waiting_tls: int = 256  # the same over TLS: a handshake under way holds ~43 KiB
    first_line_s: float = 10.0  # until the request line names the route
    idle_s: float = 30.0  # the longest one read or write of a connection waits
    keepalive_s: float = 30.0
    max_head: int = 64 << 10


class BoundedServer:
    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BoundedHandler],
        *,
        limits: ServerLimits = ServerLimits(),
        routes: Callable[[str, str], RouteLimits] = lambda method, path: RouteLimits(),
        tls: ssl.SSLContext | None = None,
    ):
        self.RequestHandlerClass = handler
        self.limits = limits
        self.route_limits = routes
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.socket = socket.create_server(address, family=family, backlog=1024)
        self.server_address = self.socket.getsockname()
        self.acceptor = Acceptor(
            self.socket,
            tls,
            max_waiting=limits.max_waiting_tls if tls else limits.max_waiting,
            # a worker holds its connection and maybe one more (the engine's save stream)
            reserved=FD_HEADROOM + 2 * limits.workers + limits.backlog,
            head_s=self._head_s,
            first_line_s=limits.first_line_s,
            keepalive_s=limits.keepalive_s,
            idle_s=limits.idle_s,
            max_head=limits.max_head,
            hand_off=self._submit,
        )
        self.ready: queue.Queue[Conn | None] = queue.Queue(maxsize=limits.backlog)
        self.threads: list[threading.Thread] = []
        self.idle_workers = 0
        self.busy_refusals = 0
        self._lock = threading.Lock()
        self._stopped = threading.Event()

    # --- the ThreadingHTTPServer calls its users make

    def serve_forever(self, poll_interval: float = 0.0) -> None:
        try:
            self.acceptor.run()
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        self.acceptor.stop()
        self._stopped.wait(STOP_WAIT_S)

    def server_close(self) -> None:
        self.acceptor.stop()
        for _ in self.threads:
            try:
                self.ready.put_nowait(None)
            except queue.Full:
                break
        try:
            self.socket.close()
        except OSError:
            pass

    def status(self) -> HttpServerStatus:
        return {
            **self.acceptor.figures(),
            "workers": len(self.threads),
            "busy_refusals": self.busy_refusals,
        }

    # --- the pool

    def _head_s(self, request_line: bytes) -> float:
        parts = request_line.decode("latin-1").split()
        limits = self.route_limits(parts[0], parts[1]) if len(parts) >= 2 else RouteLimits()
        return limits.head_s

    def _submit(self, conn: Conn) -> None:
        """From the acceptor: a connection with a whole head, to a free worker or the queue."""
        with self._lock:
            if self.ready.qsize() >= self.idle_workers and len(self.threads) < self.limits.workers:
                thread = threading.Thread(target=self._work, name=f"http-{len(self.threads)}", daemon=True)
                self.threads.append(thread)
                self.idle_workers += 1
                thread.start()
        try:
            self.ready.put_nowait(conn)
        except queue.Full:
            self.busy_refusals += 1
            try:
                conn.sock.send(BUSY)
            except OSError:
                pass
            conn.close()

    def _work(self) -> None:
        while (conn := self.ready.get()) is not None:
            with self._lock:
                self.idle_workers -= 1
            try:
                self._serve(conn)
            finally:
                with self._lock:
                    self.idle_workers += 1

    def _serve(self, conn: Conn) -> None:
        keep = False
        try:
            conn.sock.setblocking(True)
            conn.deadline = time.monotonic() + self.limits.idle_s  # the head is in the buffer
            handler = self.RequestHandlerClass(conn, conn.address, self)  # type: ignore[arg-type]
            keep = handler.kept_alive()
        except Exception as exc:  # noqa: BLE001 - one connection's end, never the pool's
            log.debug("connection from %s ended: %s", conn.address[0], type(exc).__name__)
        if self.acceptor.stopping:
            conn.close()
        else:
            conn.deadline = math.inf
            self.acceptor.give_back(conn, keep)


class BoundedHandler(BaseHTTPRequestHandler):
    """One request per hand-off; its route's body bounds are checked before the handler's
    do_* runs (refuse_request answers in the subclass's own error form)."""

    protocol_version = "HTTP/1.1"
    server: BoundedServer  # type: ignore[assignment]
    request: Conn

    def setup(self) -> None:
        self.conn = self.request
        self.connection = self.conn.sock
        self.rfile = self.conn.reader  # type: ignore[assignment]
        self.wfile = self.conn.writer  # type: ignore[assignment]
        if self.disable_nagle_algorithm:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
        self.body_length = -1  # -1: unknown (chunked, refused): the connection closes after

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()

    def finish(self) -> None:
        pass

    def kept_alive(self) -> bool:
        """Whether the connection may carry another request: asked to, and the body read whole."""
        return not self.close_connection and self.body_length == self.conn.read_count

    def refuse_request(self, status: int, reason: str, message: str) -> None:
        self.send_error(status, message)

    def handle_expect_100(self) -> bool:
        return True  # "100 Continue" only once the body's bounds allow it (parse_request)

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        limits = self.server.route_limits(self.command, self.path)
        self.conn.deadline = time.monotonic() + limits.body_s
        self.conn.read_count, self.conn.body_end = 0, None
        chunked = "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()
        length = (self.headers.get("Content-Length") or "0").strip()
        if chunked and not limits.chunked:
            self.close_connection = True
            self.refuse_request(411, "length_required", "send a Content-Length, not a chunked body")
            return False
        if not chunked and length.isdigit() and len(length) < 20:
            self.body_length = int(length)
            if limits.body_bytes is not None and self.body_length > limits.body_bytes:
                self.close_connection = True
                self.refuse_request(413, "too_large", f"body of {length} bytes exceeds {limits.body_bytes}")
                return False
            self.conn.body_end = self.body_length
            if not self.body_length:
                self.conn.deadline = math.inf
        expect = (self.headers.get("Expect") or "").lower() == "100-continue"
        if expect and self.request_version >= "HTTP/1.1":
            return super().handle_expect_100()
        return True
