"""The prober's side of an active probe (the wire form is in peer/probe.py): to one
peer, on one connection, round trips (RTT p50/p99), then an upload and a download, each
bounded by bytes and seconds. Runs in an executor scheduler thread (traffic.probe).
Notes (why, figures, history): docs/design-notes.md.
"""

from __future__ import annotations

import io
import math
import socket
import ssl
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

from faden_agent.failure import Failure
from faden_agent.peer import probe
from faden_agent.tls import client_context

CONNECT_TIMEOUT_S = 5.0
# A phase may run this much past its time bound (what is in flight drains, the answer comes
# back) before the peer counts as stalled.
GRACE_S = 5.0
HEAD_LIMIT = 16 << 10
BODY_LIMIT = 64 << 10
KNOWN_REFUSALS = ("ticket_refused", "ticket_expired", "peer_busy")


@dataclass(frozen=True)
class Bounds:
    duration_s: float  # per phase: round trips, upload, download
    max_bytes: int  # per direction
    round_trips: int


class ProbeFailed(Failure):
    """A traffic probe against a peer failed; reason is the command's."""


class Stopped(Exception):
    """should_stop() said so (cancelled, deadline)."""


def percentile(ordered: list[float], q: float) -> float:
    """Nearest rank of an ascending list."""
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


@dataclass
class Probe:
    """One probe of one peer; `figures` holds what was measured so far."""

    address: str  # http(s)://host:port
    ticket: str
    bounds: Bounds
    verify: bool | str = True
    should_stop: Callable[[], bool] = lambda: False
    # Registers a call that unblocks the probe at once when it must stop (Job.on_abort).
    on_abort: Callable[[Callable[[], None]], None] = lambda hook: None
    figures: dict[str, Any] = field(default_factory=dict)

    def run(self) -> dict[str, Any]:
        sock = self._connect()
        self.on_abort(lambda: sock.shutdown(socket.SHUT_RDWR))
        try:
            rfile = sock.makefile("rb")
            granted = self._upgrade(sock, rfile)
            self._round_trips(sock, rfile, min(self.bounds.round_trips, granted.echoes - 1))
            max_bytes, seconds = min(self.bounds.max_bytes, granted.bytes), min(self.bounds.duration_s, granted.seconds)
            self._upload(sock, rfile, max_bytes, seconds)
            self._download(sock, rfile, max_bytes, seconds)
        except (OSError, EOFError, struct.error, ProbeFailed) as exc:
            self._check()  # cut by on_abort: stopped, not failed
            if isinstance(exc, ProbeFailed):
                raise
            if isinstance(exc, TimeoutError):
                raise ProbeFailed("timeout", f"{self.address} stopped answering") from None
            raise ProbeFailed("peer_failed", f"{self.address}: the probe broke: {type(exc).__name__}") from None
        finally:
            sock.close()
        return self.figures

    # --- the steps

    def _connect(self) -> socket.socket:
        parts = urlsplit(self.address)
        try:
            sock = socket.create_connection((parts.hostname, parts.port), timeout=CONNECT_TIMEOUT_S)
        except OSError as exc:
            raise ProbeFailed("peer_unreachable", f"cannot connect to {self.address}: {type(exc).__name__}") from None
        probe.tune(sock)
        if parts.scheme == "https":
            try:
                sock = client_context(self.verify).wrap_socket(sock, server_hostname=parts.hostname)
            except (OSError, ssl.SSLError) as exc:
                sock.close()
                raise ProbeFailed("peer_unreachable", f"TLS with {self.address} failed: {type(exc).__name__}") from None
        return sock

    def _upgrade(self, sock: socket.socket, rfile: io.BufferedIOBase) -> probe.Limits:
        """The session's caps as the peer grants them; ProbeFailed when it refuses."""
        host = urlsplit(self.address).netloc
        sock.sendall(
            (
                f"POST {probe.PATH} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {self.ticket}\r\n"
                f"Connection: Upgrade\r\nUpgrade: {probe.UPGRADE}\r\nContent-Length: 0\r\n\r\n"
            ).encode()
        )
        status, headers = _read_head(rfile)
        if status == 101:
            try:
                return probe.Limits(
                    bytes=int(headers.get("x-faden-probe-max-bytes", "")),
                    seconds=float(headers.get("x-faden-probe-max-seconds", "")),
                    echoes=int(headers.get("x-faden-probe-max-echoes", "")),
                )
            except ValueError:
                raise ProbeFailed("peer_failed", f"{self.address} granted no readable limits") from None
        length = headers.get("content-length", "0")
        body = rfile.read(min(int(length), BODY_LIMIT)) if length.isdigit() else b""
        try:
            refusal = orjson.loads(body)
            reason = refusal["reason"] if isinstance(refusal, dict) else None
        except (orjson.JSONDecodeError, KeyError):
            reason = None
        if reason in KNOWN_REFUSALS:
            raise ProbeFailed(reason, f"{self.address} refused the probe: {str(refusal.get('message'))[:200]}")
        raise ProbeFailed("peer_failed", f"{self.address} answered HTTP {status} to the probe")

    def _round_trips(self, sock: socket.socket, rfile: io.BufferedIOBase, count: int) -> None:
        sock.settimeout(self.bounds.duration_s + GRACE_S)
        samples: list[float] = []
        started = time.monotonic()
        # One more than asked: the first pays for the connection's warm-up and is dropped.
        for n in range(max(1, count) + 1):
            if time.monotonic() - started > self.bounds.duration_s and len(samples) > 1:
                break
            self._check()
            payload = struct.pack(">Q", n)
            sent = time.perf_counter()
            sock.sendall(probe.frame(b"E", payload))
            if _expect(rfile, b"E") != payload:
                raise ProbeFailed("peer_failed", f"{self.address} echoed something else")
            samples.append((time.perf_counter() - sent) * 1000)
        ordered = sorted(samples[1:] or samples)
        self.figures.update(
            round_trips=len(ordered),
            rtt_min_ms=round(ordered[0], 3),
            rtt_p50_ms=round(percentile(ordered, 0.5), 3),
            rtt_p99_ms=round(percentile(ordered, 0.99), 3),
        )

    def _upload(self, sock: socket.socket, rfile: io.BufferedIOBase, max_bytes: int, seconds: float) -> None:
        sock.settimeout(seconds + GRACE_S)
        started = time.monotonic()
        sent, _ = probe.send_bounded(sock.sendall, max_bytes, seconds, self.should_stop)
        self._check()
        sock.sendall(probe.frame(b"F"))
        received, _ = probe.RESULT.unpack(_expect(rfile, b"R", probe.RESULT.size))
        elapsed = time.monotonic() - started  # first byte sent to the peer's receipt of the last
        if received != sent:
            raise ProbeFailed("peer_failed", f"{self.address} received {received} of {sent} bytes")
        self.figures.update(send_bytes=sent, send_s=round(elapsed, 4), send_bytes_per_s=round(sent / elapsed, 1))

    def _download(self, sock: socket.socket, rfile: io.BufferedIOBase, max_bytes: int, seconds: float) -> None:
        sock.settimeout(seconds + GRACE_S)
        scratch = memoryview(bytearray(probe.CHUNK))
        started = time.monotonic()
        sock.sendall(probe.frame(b"S", probe.ASK.pack(max_bytes, seconds)))
        received = 0
        while True:
            op, length = probe.HEADER.unpack(probe.read_exact(rfile, probe.HEADER.size) or b"")
            if op != b"D":
                break
            received += length
            if length > probe.FRAME_MAX or received > max_bytes:
                raise ProbeFailed("peer_failed", f"{self.address} sent more than the {max_bytes} bytes asked for")
            if time.monotonic() - started > seconds + GRACE_S:
                raise ProbeFailed("timeout", f"{self.address} sent for longer than {seconds:g} s")
            self._check()
            probe.discard(rfile, length, scratch)
        elapsed = time.monotonic() - started
        if op != b"F" or length != probe.RESULT.size:
            raise ProbeFailed("peer_failed", f"{self.address} ended the download with frame {op!r}")
        sent, _ = probe.RESULT.unpack(probe.read_exact(rfile, length) or b"")
        if sent != received:
            raise ProbeFailed("peer_failed", f"{self.address} says it sent {sent} bytes, {received} arrived")
        self.figures.update(
            receive_bytes=received, receive_s=round(elapsed, 4), receive_bytes_per_s=round(received / elapsed, 1)
        )

    def _check(self) -> None:
        if self.should_stop():
            raise Stopped()


def _expect(rfile: io.BufferedIOBase, op: bytes, size: int | None = None) -> bytes:
    """The payload of the next frame, which must be `op` (X: the peer refused; its words)."""
    got, length = probe.HEADER.unpack(probe.read_exact(rfile, probe.HEADER.size) or b"")
    if length > max(probe.ECHO_MAX, probe.TEXT_MAX, probe.RESULT.size):
        raise ProbeFailed("peer_failed", f"a frame of {length} bytes where {op!r} was expected")
    payload = probe.read_exact(rfile, length) or b""
    if got == b"X":
        raise ProbeFailed("peer_failed", "the peer refused: " + payload.decode(errors="replace")[:200])
    if got != op or (size is not None and length != size):
        raise ProbeFailed("peer_failed", f"frame {got!r} of {length} bytes where {op!r} was expected")
    return payload


def _read_head(rfile: io.BufferedIOBase) -> tuple[int, dict[str, str]]:
    """Status and headers (names lower-case) of an HTTP answer, at most HEAD_LIMIT bytes."""
    status_line = rfile.readline(HEAD_LIMIT)
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise ProbeFailed("peer_failed", f"not an HTTP answer: {status_line[:100]!r}")
    headers: dict[str, str] = {}
    budget = HEAD_LIMIT - len(status_line)
    while (line := rfile.readline(budget)) not in (b"\r\n", b"\n", b""):
        budget -= len(line)
        if budget <= 0:
            raise ProbeFailed("peer_failed", f"an answer head over {HEAD_LIMIT} bytes")
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers
