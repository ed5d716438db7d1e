"""HTTP/1.1 to a peer on one socket the caller holds (so a watchdog can shut it): connect
(TLS with the agent's client context), a bounded answer head, a bounded refusal body, a
chunked or sized body. Nothing is followed or decoded: a redirect or an encoded body is
the peer's failure. Every way a peer fails is PeerFailure(reason, message)."""

from __future__ import annotations

import re
import socket
import ssl
import threading
from collections.abc import Iterator
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import orjson

from faden_agent.common.failure import Failure
from faden_agent.http.tls import client_context

CONNECT_TIMEOUT_S = 5.0
HEAD_LIMIT = 16 << 10
BODY_LIMIT = 64 << 10
CHUNK = 1 << 20


class PeerFailure(Failure):
    """One peer failed a transfer or a probe; reason is the command's."""


def connect(address: str, verify: bool | str, timeout_s: float = CONNECT_TIMEOUT_S) -> socket.socket:
    """A connected (TLS for https) socket to `address`; PeerFailure peer_unreachable."""
    parts = urlsplit(address)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        sock = socket.create_connection((parts.hostname, port), timeout=timeout_s)
    except OSError as exc:
        raise PeerFailure("peer_unreachable", f"cannot connect to {address}: {type(exc).__name__}") from None
    if parts.scheme == "https":
        # the whole handshake within timeout_s: a peer dripping its answer is cut all the same
        timer = threading.Timer(timeout_s, shut, (sock,))
        timer.start()
        try:
            sock = client_context(verify).wrap_socket(sock, server_hostname=parts.hostname)
        except (OSError, ssl.SSLError) as exc:
            sock.close()
            raise PeerFailure("peer_unreachable", f"TLS with {address} failed: {type(exc).__name__}") from None
        finally:
            timer.cancel()
    return sock


def shut(sock: socket.socket) -> None:
    """End both directions now: a read blocked on it returns at once (from another thread)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def read_head(rfile: BinaryIO) -> tuple[int, dict[str, str]]:
    """Status and headers (names lower-case) of an HTTP answer, at most HEAD_LIMIT bytes."""
    status_line = rfile.readline(HEAD_LIMIT)
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise PeerFailure("peer_failed", f"not an HTTP answer: {status_line[:100]!r}")
    headers: dict[str, str] = {}
    budget = HEAD_LIMIT - len(status_line)
    while (line := rfile.readline(budget)) not in (b"\r\n", b"\n", b""):
        budget -= len(line)
        if budget <= 0:
            raise PeerFailure("peer_failed", f"an answer head over {HEAD_LIMIT} bytes")
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


def refusal(rfile: BinaryIO, headers: dict[str, str]) -> dict[str, Any]:
    """The JSON object of a refusal ({"reason", "message"}), at most BODY_LIMIT bytes; {} for
    anything else."""
    length = headers.get("content-length", "")
    body = rfile.read(min(int(length), BODY_LIMIT)) if length.isdigit() else b""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return answer if isinstance(answer, dict) else {}


def body(rfile: Any, headers: dict[str, str], source: str) -> Iterator[bytes]:
    """The answer's body as sent: chunked, sized, or up to the end of the connection; each
    piece as it arrives (read1: a slow peer's bytes count as they come). A connection that
    ends or resets early is a stream that broke; "malformed" is kept for bytes that break
    the chunked framing."""
    if (headers.get("content-encoding") or "identity").lower() != "identity":
        raise PeerFailure("peer_failed", f"peer {source} sent an encoded body ({headers['content-encoding'][:40]})")
    if "chunked" in (headers.get("transfer-encoding") or "").lower():
        yield from _Chunked(rfile, source).pieces()
        return
    length = headers.get("content-length")
    left = int(length) if length and length.isdigit() else -1
    while left != 0:
        data = rfile.read1(CHUNK if left < 0 else min(CHUNK, left))
        if not data:
            if left > 0:
                raise PeerFailure("peer_failed", f"the stream from peer {source} ended {left} bytes short")
            return
        left -= len(data) if left > 0 else 0
        yield data


CRLF = b"\r\n"
SIZE_LINE_LIMIT = 100  # hex size, chunk extensions, CRLF
_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(;[^\r\n]*)?\r?\n")


class _Chunked:
    """The chunked framing (RFC 9112 7.1) read strictly: an EOF or a reset anywhere is
    broke(), bytes that break the framing are malformed()."""

    def __init__(self, rfile: Any, source: str):
        self.rfile, self.source = rfile, source
        self.received = 0  # body bytes (chunk data) so far

    def pieces(self) -> Iterator[bytes]:
        try:
            while size := self._size():
                while size:
                    data = self.rfile.read1(min(CHUNK, size))
                    if not data:
                        raise self._broke("inside a chunk's data")
                    size -= len(data)
                    self.received += len(data)
                    yield data
                end = self.rfile.read(len(CRLF))
                if end != CRLF:
                    raise self._broke("before a chunk's CRLF") if CRLF.startswith(end) else self._malformed(end)
        except OSError as exc:  # a reset, or the socket shut under the read
            raise self._broke(f"({type(exc).__name__})") from None

    def _size(self) -> int:
        line = self.rfile.readline(SIZE_LINE_LIMIT)
        match = _SIZE_LINE.fullmatch(line)
        if match:
            return int(match.group(1), 16)
        if not line.endswith(b"\n") and len(line) < SIZE_LINE_LIMIT:
            raise self._broke("before a chunk's size" if not line else "inside a chunk's size line")
        raise self._malformed(line)

    def _broke(self, where: str) -> PeerFailure:
        return PeerFailure(
            "peer_failed", f"the stream from peer {self.source} broke after {self.received} bytes {where}"
        )

    def _malformed(self, got: bytes) -> PeerFailure:
        return PeerFailure(
            "peer_failed", f"peer {self.source} sent a malformed chunk after {self.received} bytes: {got[:40]!r}"
        )
