"""The prober's side of an active probe (the wire form is in transfers/probe.py): to one peer, on
one connection, round trips (RTT p50/p99), then an upload and a download, each bounded by
bytes and seconds; each phase ends at its time + GRACE_S whatever the peer does. Every way
one peer fails is a ProbeFailed(reason) with what was measured before it: peer_unreachable,
ticket_refused / ticket_expired, peer_busy, timeout, peer_failed (docs/commands.md)."""

from __future__ import annotations

import math
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from faden_agent.common.failure import Stopped
from faden_agent.transfers import probe, wire
from faden_agent.transfers.watchdog import Watchdog
from faden_agent.transfers.wire import PeerFailure

CONNECT_TIMEOUT_S = wire.CONNECT_TIMEOUT_S
# A phase may run this much past its time bound (what is in flight drains, the answer comes
# back) before the peer counts as stalled.
GRACE_S = 5.0
WATCH_S = 0.1
KNOWN_REFUSALS = ("ticket_refused", "ticket_expired", "peer_busy")
ProbeFailed = PeerFailure


@dataclass(frozen=True)
class Bounds:
    duration_s: float  # per phase: round trips, upload, download
    max_bytes: int  # per direction
    round_trips: int


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
        sock = wire.connect(self.address, self.verify, CONNECT_TIMEOUT_S)
        probe.tune(sock)
        self.on_abort(lambda: wire.shut(sock))
        self._phase(self.bounds.duration_s)
        with Watchdog("probe-watch", self._overdue, lambda: wire.shut(sock), WATCH_S) as watchdog:
            try:
                rfile = sock.makefile("rb")
                granted = self._upgrade(sock, rfile)
                self._round_trips(sock, rfile, min(self.bounds.round_trips, granted.echoes - 1))
                max_bytes = min(self.bounds.max_bytes, granted.bytes)
                seconds = min(self.bounds.duration_s, granted.seconds)
                self._upload(sock, rfile, max_bytes, seconds)
                self._download(sock, rfile, max_bytes, seconds)
            except (OSError, EOFError, struct.error, ProbeFailed) as exc:
                self._check()  # cut by on_abort: stopped, not failed
                if watchdog.reason:
                    raise ProbeFailed("timeout", f"{self.address} {watchdog.reason}") from None
                if isinstance(exc, ProbeFailed):
                    raise
                if isinstance(exc, TimeoutError):
                    raise ProbeFailed("timeout", f"{self.address} stopped answering") from None
                raise ProbeFailed("peer_failed", f"{self.address}: the probe broke: {type(exc).__name__}") from None
            finally:
                sock.close()
        return self.figures

    def _phase(self, seconds: float) -> None:
        """A phase starts: it must be over within its time and GRACE_S, or the peer is stalled."""
        self._bound_s = seconds + GRACE_S
        self._phase_ends = time.monotonic() + self._bound_s

    def _overdue(self) -> str | None:
        if time.monotonic() > self._phase_ends:
            return f"stalled: a phase ran past its {self._bound_s:g} s"
        return None

    # --- the steps

    def _upgrade(self, sock: socket.socket, rfile: BinaryIO) -> probe.Limits:
        """The session's caps as the peer grants them; ProbeFailed when it refuses."""
        host = urlsplit(self.address).netloc
        sock.sendall(
            (
                f"POST {probe.PATH} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {self.ticket}\r\n"
                f"Connection: Upgrade\r\nUpgrade: {probe.UPGRADE}\r\nContent-Length: 0\r\n\r\n"
            ).encode()
        )
        status, headers = wire.read_head(rfile)
        if status == 101:
            try:
                return probe.Limits(
                    bytes=int(headers.get("x-faden-probe-max-bytes", "")),
                    seconds=float(headers.get("x-faden-probe-max-seconds", "")),
                    echoes=int(headers.get("x-faden-probe-max-echoes", "")),
                )
            except ValueError:
                raise ProbeFailed("peer_failed", f"{self.address} granted no readable limits") from None
        refusal = wire.refusal(rfile, headers)
        if refusal.get("reason") in KNOWN_REFUSALS:
            raise ProbeFailed(
                refusal["reason"], f"{self.address} refused the probe: {str(refusal.get('message'))[:200]}"
            )
        raise ProbeFailed("peer_failed", f"{self.address} answered HTTP {status} to the probe")

    def _round_trips(self, sock: socket.socket, rfile: BinaryIO, count: int) -> None:
        self._phase(self.bounds.duration_s)
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

    def _upload(self, sock: socket.socket, rfile: BinaryIO, max_bytes: int, seconds: float) -> None:
        self._phase(seconds)
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

    def _download(self, sock: socket.socket, rfile: BinaryIO, max_bytes: int, seconds: float) -> None:
        self._phase(seconds)
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


def _expect(rfile: BinaryIO, op: bytes, size: int | None = None) -> bytes:
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
