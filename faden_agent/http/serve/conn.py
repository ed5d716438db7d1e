"""One accepted connection and its file objects: every read and write waits at most
`idle_s`, and never past `deadline` (monotonic; inf: none), so a peer that sends or reads a
byte now and then holds it no longer than the bound its route or session sets."""

from __future__ import annotations

import math
import socket
import ssl
import time
from typing import Any

RECV = 64 << 10


class Conn:
    def __init__(self, sock: socket.socket, address: tuple[str, int], idle_s: float):
        self.sock = sock
        self.address = address
        self.idle_s = idle_s
        self.deadline = math.inf
        self.buffer = bytearray()  # received, not yet read by the handler
        self.read_count = 0  # bytes the handler read of this request's body
        self.body_end: int | None = None  # read_count at which the body's deadline lifts
        self.reader = Reader(self)
        self.writer = Writer(self)

    def timeout(self) -> float:
        """What the next socket call may wait; TimeoutError once the deadline has passed."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the connection's time is up")
        return min(self.idle_s, left)

    def fill(self) -> bool:
        """Receive more into the buffer; False at the end of the stream."""
        self.sock.settimeout(self.timeout())
        data = self.sock.recv(RECV)
        self.buffer += data
        return bool(data)

    def take(self, size: int) -> bytes:
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        self.read_count += len(data)
        if self.read_count == self.body_end:
            self.deadline = math.inf  # the body is in: an answer's writes wait the idle bound each
        return data

    def plain(self) -> socket.socket:
        """The TCP socket under TLS (its bytes only to be drained), or the socket itself."""
        if isinstance(self.sock, ssl.SSLSocket):
            return socket.socket(fileno=self.sock.detach())
        return self.sock

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Reader:
    """rfile: readline, read (to `size` or the end) and readinto (what is there, at least a byte)."""

    def __init__(self, conn: Conn):
        self.conn = conn

    def readable(self) -> bool:
        return True

    def readline(self, limit: int = -1) -> bytes:
        buffer = self.conn.buffer
        while True:
            end = buffer.find(b"\n")
            if end >= 0 and (limit < 0 or end < limit):
                return self.conn.take(end + 1)
            if 0 <= limit <= len(buffer):
                return self.conn.take(limit)
            if not self.conn.fill():
                return self.conn.take(len(buffer))

    def read(self, size: int = -1) -> bytes:
        while (size < 0 or len(self.conn.buffer) < size) and self.conn.fill():
            pass
        return self.conn.take(len(self.conn.buffer) if size < 0 else size)

    def readinto(self, target: Any) -> int:
        if not self.conn.buffer and not self.conn.fill():
            return 0
        data = self.conn.take(len(target))
        target[: len(data)] = data
        return len(data)

    def close(self) -> None:
        pass


class Writer:
    """wfile: each write is sent whole within the connection's timeout (sendall's bound is the
    whole call), so a reader that drains a byte now and then cannot hold it longer."""

    def __init__(self, conn: Conn):
        self.conn = conn

    def write(self, data: bytes) -> int:
        self.conn.sock.settimeout(self.conn.timeout())
        self.conn.sock.sendall(data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
