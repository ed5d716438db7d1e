"""A tiny non-blocking HTTP/1.x server turned by its owner's poll loop (the supervisor's).
Owns one listening socket and at most MAX_CONNECTIONS open ones; nothing blocks: each connection
has one deadline for its whole life, a head is capped at MAX_HEAD_BYTES, one request per
connection; a full table closes its oldest connection. It accepts at most ANSWERS_PER_S a
second (BURST at once): past that it stops accepting and the rest wait in the kernel's queue."""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Callable

MAX_CONNECTIONS = 32
MAX_HEAD_BYTES = 8192
CONNECTION_DEADLINE_S = 5.0
ACCEPTS_PER_WAKE = 64  # a flood of connections cannot keep the loop in accept()
# The budget that bounds the endpoint's CPU whoever scrapes: an answer costs the supervisor
# 0.1-0.5 ms (docs/benchmarks.md, "Metrics under a scrape flood"), so 100 a second stay well
# under a fifth of a core; Prometheus asks once every 15 s or so.
ANSWERS_PER_S = 100.0
BURST = 20

# (method, path, headers) -> (status, content type, body)
Handler = Callable[[str, str, dict[str, str]], tuple[int, str, bytes]]
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 431: "Too Large", 503: "Busy"}


class Connection:
    __slots__ = ("sock", "deadline", "inbox", "outbox", "sent", "watched")

    def __init__(
        self,
        sock: socket.socket,
        deadline: float,
        inbox: bytearray | None = None,
        outbox: memoryview | bytes = b"",
        sent: int = 0,
        watched: bool = False,
    ) -> None:
        self.sock = sock
        self.deadline = deadline
        self.inbox: bytearray = bytearray() if inbox is None else inbox
        self.outbox = outbox
        self.sent = sent
        self.watched = watched  # one answered within its first wake-up never reaches the poller


class HttpServer:
    def __init__(self, sock: socket.socket, handler: Handler, watch: Callable[[int, bool, bool], None]):
        """watch(fd, readable, writable) tells the owner's poller what to wait for (both
        False: forget the fd)."""
        self.sock = sock
        self.sock.setblocking(False)
        self.handler = handler
        self.watch = watch
        self.connections: dict[int, Connection] = {}
        self.dropped = 0  # connections closed early because the table was full
        self.answered = 0
        self.held_s = 0.0  # time accepting was held back because the budget was spent
        self._tokens, self._refilled = float(BURST), time.monotonic()
        self._held_since: float | None = None
        self._resume_at = 0.0
        watch(sock.fileno(), True, False)

    @classmethod
    def bind(cls, host: str, port: int, handler: Handler, watch: Callable[[int, bool, bool], None]) -> HttpServer:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if hasattr(socket, "TCP_DEFER_ACCEPT"):  # woken once the request is there: one wake-up a scrape
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, int(CONNECTION_DEADLINE_S))
            sock.bind((host, port))
            sock.listen(128)
        except OSError:
            sock.close()
            raise
        return cls(sock, handler, watch)

    @property
    def address(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def figures(self) -> dict[str, float]:
        """What the endpoint's own families show (families.ENDPOINT_FIGURES)."""
        held = self.held_s + (time.monotonic() - self._held_since if self._held_since is not None else 0.0)
        return {"dropped": self.dropped, "answered": self.answered, "held_s": round(held, 3), "budget": ANSWERS_PER_S}

    def next_deadline(self) -> float | None:
        due = [c.deadline for c in self.connections.values()]
        if self._held_since is not None:
            due.append(self._resume_at)
        return min(due, default=None)

    def serve(self, ready: set[int]) -> None:
        """Do what the ready fds allow, then close connections past their deadline."""
        if self._held_since is not None and time.monotonic() >= self._resume_at:
            self._resume()
        elif self.sock.fileno() in ready:
            self._accept()
        for fd in [fd for fd in ready if fd in self.connections]:
            conn = self.connections[fd]
            if conn.outbox:
                self._write(conn)
            else:
                self._read(conn)
        now = time.monotonic()
        for conn in [c for c in self.connections.values() if c.deadline <= now]:
            self._close(conn)

    def close(self) -> None:
        for conn in list(self.connections.values()):
            self._close(conn)
        if self._held_since is None:
            self.watch(self.sock.fileno(), False, False)
        self.sock.close()

    # ---------------------------------------------------------------- steps

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_WAKE):
            if not self._take_token():
                self._hold()
                return
            try:
                sock, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                self._tokens += 1  # nobody came: not spent
                return
            except OSError as exc:  # EMFILE and the like: try again at the next wake
                self._tokens += 1
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    return
                continue
            if len(self.connections) >= MAX_CONNECTIONS:
                self.dropped += 1
                self._close(min(self.connections.values(), key=lambda c: c.deadline))
            sock.setblocking(False)
            conn = Connection(sock, time.monotonic() + CONNECTION_DEADLINE_S)
            self.connections[sock.fileno()] = conn
            self._read(conn)  # the request is often there already: no second wake-up for it
            if not conn.watched and self.connections.get(sock.fileno()) is conn:
                self._watch(conn, True, False)

    def _take_token(self) -> bool:
        now = time.monotonic()
        self._tokens = min(float(BURST), self._tokens + (now - self._refilled) * ANSWERS_PER_S)
        self._refilled = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True

    def _hold(self) -> None:
        """The budget is spent: stop watching the listening socket until the next token."""
        now = time.monotonic()
        self._held_since = now
        self._resume_at = now + (1 - self._tokens) / ANSWERS_PER_S
        self.watch(self.sock.fileno(), False, False)

    def _resume(self) -> None:
        assert self._held_since is not None
        self.held_s += time.monotonic() - self._held_since
        self._held_since = None
        self.watch(self.sock.fileno(), True, False)
        self._accept()  # those waiting in the queue: at once, not at the next wake-up

    def _read(self, conn: Connection) -> None:
        try:
            chunk = conn.sock.recv(MAX_HEAD_BYTES + 1 - len(conn.inbox))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._close(conn)
            return
        conn.inbox += chunk
        end = conn.inbox.find(b"\r\n\r\n")
        if end < 0:
            end = conn.inbox.find(b"\n\n")
        if end >= 0:
            self._respond(conn, *self._answer(bytes(conn.inbox[:end])))
        elif len(conn.inbox) > MAX_HEAD_BYTES:
            self._respond(conn, 431, "text/plain", b"request head over 8192 bytes\n")

    def _answer(self, head: bytes) -> tuple[int, str, bytes]:
        lines = head.decode("latin-1").replace("\r\n", "\n").split("\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
            return 400, "text/plain", b"not an HTTP/1.x request line\n"
        method, target = parts[0], parts[1]
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"only GET and HEAD\n"
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        status, ctype, body = self.handler(method, target.split("?", 1)[0], headers)
        return status, ctype, b"" if method == "HEAD" else body

    def _respond(self, conn: Connection, status: int, ctype: str, body: bytes) -> None:
        head = (
            f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        conn.outbox = memoryview(head.encode("latin-1") + body)  # sent on without copies of what is left
        self.answered += 1
        self._write(conn)
        if self.connections.get(conn.sock.fileno()) is conn:
            self._watch(conn, False, True)

    def _write(self, conn: Connection) -> None:
        try:
            conn.sent += conn.sock.send(conn.outbox[conn.sent :])
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            conn.sent = len(conn.outbox)
        if conn.sent >= len(conn.outbox):
            self._close(conn)

    def _watch(self, conn: Connection, readable: bool, writable: bool) -> None:
        conn.watched = True
        self.watch(conn.sock.fileno(), readable, writable)

    def _close(self, conn: Connection) -> None:
        fd = conn.sock.fileno()
        if self.connections.pop(fd, None) is None:
            return
        if conn.watched:
            self.watch(fd, False, False)
        try:
            conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        conn.sock.close()
