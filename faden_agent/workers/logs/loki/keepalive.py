"""One keep-alive HTTP/1.1 connection for Loki pushes: POST a body, read a short answer,
the whole exchange (connect, body, 1xx heads, answer) within one deadline per push."""

from __future__ import annotations

import socket
import ssl
import time
from typing import NamedTuple

MAX_LINE_BYTES = 65536  # one status or header line
MAX_HEADERS = 100


class BadAnswer(Exception):
    """Whatever came back is not HTTP/1.x."""


class Reply(NamedTuple):
    status: int
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    body: bytes  # at most the caller's limit + 1 bytes
    reusable: bool  # read to its end and the server keeps the connection open


class _Reader:
    """Buffered reads of a socket that end at a deadline however the bytes drip in (a
    socket timeout bounds one recv only; a head sent a byte at a time never ends)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buffer = bytearray()
        self.deadline = float("inf")  # time.monotonic(); set for each push

    def _fill(self) -> bool:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no whole answer before the push's deadline")
        self.sock.settimeout(left)
        chunk = self.sock.recv(65536)
        self.buffer += chunk
        return bool(chunk)

    def readline(self, limit: int) -> bytes:
        """Up to and including the next newline, at most limit bytes; b"" at the end."""
        while True:
            end = self.buffer.find(b"\n", 0, limit)
            if end >= 0 or len(self.buffer) >= limit or not self._fill():
                size = end + 1 if end >= 0 else min(limit, len(self.buffer))
                line = bytes(self.buffer[:size])
                del self.buffer[:size]
                return line

    def read(self, size: int) -> bytes:
        """size bytes, fewer when the connection ends first."""
        while len(self.buffer) < size and self._fill():
            pass
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data


class KeepAliveConnection:
    def __init__(self, host: str, port: int | None, tls: ssl.SSLContext | None, timeout_s: float):
        self.host = host
        self.port = port or (443 if tls else 80)
        self.tls = tls
        self.timeout_s = timeout_s
        name = f"[{host}]" if ":" in host else host  # an IPv6 literal
        self._host_line = f"Host: {name}{'' if port is None else f':{port}'}\r\n".encode()
        self._sock: socket.socket | None = None
        self._file: _Reader | None = None

    def post(self, path: str, headers: dict[str, str], body: bytes, limit: int) -> Reply:
        """Send one request (connecting first if needed) and read its answer, the body up to
        limit + 1 bytes, all within timeout_s. Raises OSError (TimeoutError past it,
        ConnectionError when a kept-alive connection turns out closed) or BadAnswer; the
        caller closes the connection then."""
        deadline = time.monotonic() + self.timeout_s
        if self._sock is None:
            self._connect()
        assert self._sock is not None and self._file is not None
        self._file.deadline = deadline
        head = f"POST {path} HTTP/1.1\r\n".encode() + self._host_line
        head += "".join(f"{name}: {value}\r\n" for name, value in headers.items()).encode("latin-1")
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("connected only after the push's deadline")
        self._sock.settimeout(left)  # sendall: the whole of it within what is left
        self._sock.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        while True:
            version, status, answer_headers = self._read_head()
            if not 100 <= status < 200:
                break
        body, complete = self._read_body(status, answer_headers, limit)
        keep = version == "HTTP/1.1" and answer_headers.get("connection", "").lower() != "close"
        return Reply(status, answer_headers, body, complete and keep)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = self._file = None

    def _connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout_s)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise
        self._sock, self._file = sock, _Reader(sock)

    def _line(self) -> bytes:
        assert self._file is not None
        line = self._file.readline(MAX_LINE_BYTES + 1)
        if len(line) > MAX_LINE_BYTES:
            raise BadAnswer("an answer line over 64 KiB")
        return line

    def _read_head(self) -> tuple[str, int, dict[str, str]]:
        line = self._line()
        if not line:
            raise ConnectionResetError("the server closed the connection without an answer")
        parts = line.decode("latin-1").split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise BadAnswer(f"not an HTTP status line: {line[:100]!r}")
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            line = self._line()
            if line in (b"\r\n", b"\n", b""):
                return parts[0], int(parts[1]), headers
            name, colon, value = line.decode("latin-1").partition(":")
            if colon:
                headers[name.strip().lower()] = value.strip()
        raise BadAnswer(f"more than {MAX_HEADERS} answer headers")

    def _read_body(self, status: int, headers: dict[str, str], limit: int) -> tuple[bytes, bool]:
        """(body up to limit + 1 bytes, whether it was read to its end)."""
        assert self._file is not None
        if status in (204, 304):
            return b"", True
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return self._read_chunked(limit)
        length = headers.get("content-length")
        if length is None:  # until the server closes: never reusable
            return self._file.read(limit + 1), False
        if not length.isdigit():
            raise BadAnswer(f"Content-Length {length[:40]!r}")
        wanted = int(length)
        body = self._file.read(min(wanted, limit + 1))
        if len(body) < min(wanted, limit + 1):
            raise ConnectionResetError("the answer ended early")
        return body, wanted <= limit

    def _read_chunked(self, limit: int) -> tuple[bytes, bool]:
        assert self._file is not None
        body = b""
        while True:
            size_text = self._line().split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise BadAnswer(f"chunk size {size_text[:40]!r}") from None
            if size == 0:
                while self._line() not in (b"\r\n", b"\n", b""):  # trailers
                    pass
                return body, True
            if len(body) + size > limit:
                return body + self._file.read(limit + 1 - len(body)), False
            chunk = self._file.read(size)
            if len(chunk) < size:
                raise ConnectionResetError("the answer ended early")
            body += chunk
            self._line()  # the CRLF after the chunk
