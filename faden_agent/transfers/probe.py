"""Active probes between peer machines: the wire form and the answering side."""

from __future__ import annotations

import logging
import math
import socket
import struct
import time
from typing import Any, BinaryIO, NamedTuple

from faden_agent import protocol

log = logging.getLogger(__name__)

PATH = protocol.PEER_PROBE_PATH
UPGRADE = "faden-probe/1"
HEADER = struct.Struct(">cI")  # op, payload length
RESULT = struct.Struct(">Qd")  # bytes, seconds (R and F)
ASK = struct.Struct(">Qd")  # S: bytes, seconds
ECHO_MAX = 64
TEXT_MAX = 200  # an X frame's words
FRAME_MAX = 1 << 20
CHUNK = 256 << 10  # the size of D frames this side sends, and the prober's
# Unsent bytes a socket may queue (TCP_NOTSENT_LOWAT): what is still queued when a phase's
# time is up stays small, so the phase ends near its bound on a slow link too.
NOTSENT_LOWAT = 256 << 10
MAX_SESSIONS = 4


class Limits(NamedTuple):
    bytes: int = 1 << 30  # per direction and session
    seconds: float = 30.0  # per direction and session
    echoes: int = 10_000
    session_s: float = 120.0
    idle_s: float = 10.0


LIMITS = Limits()


class Refused(Exception):
    """The prober passed a cap or sent a bad frame: told with X, then the session ends."""


def tune(sock: socket.socket) -> None:
    """No Nagle (a round trip is one small frame each way); little unsent data queued."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    lowat = getattr(socket, "TCP_NOTSENT_LOWAT", 25)  # 25 on Linux
    try:
        sock.setsockopt(socket.IPPROTO_TCP, lowat, NOTSENT_LOWAT)
    except OSError:  # an old kernel: phases may then overrun their time by the send buffer
        pass


def frame(op: bytes, payload: bytes = b"") -> bytes:
    return HEADER.pack(op, len(payload)) + payload


def read_exact(rfile: BinaryIO, size: int) -> bytes | None:
    """`size` bytes, or None at a clean end of stream before the first byte."""
    data = rfile.read(size)
    if not data:
        return None
    while len(data) < size:
        more = rfile.read(size - len(data))
        if not more:
            raise EOFError(f"the stream ended {size - len(data)} bytes short")
        data += more
    return data


def discard(rfile: Any, size: int, scratch: memoryview) -> None:  # any reader with readinto
    """Read and drop `size` bytes (a D frame's payload) without allocating."""
    while size:
        got = rfile.readinto(scratch[: min(size, len(scratch))])
        if not got:
            raise EOFError(f"the stream ended {size} bytes short")
        size -= got


def send_bounded(write: Any, max_bytes: int, seconds: float, should_stop: Any = lambda: False) -> tuple[int, float]:
    """D frames of zeros until max_bytes or seconds, whichever comes first; (bytes, seconds)."""
    zeros = bytes(CHUNK)
    sent, started = 0, time.monotonic()
    while sent < max_bytes and time.monotonic() - started < seconds and not should_stop():
        size = min(CHUNK, max_bytes - sent)
        write(HEADER.pack(b"D", size))
        write(zeros[:size] if size < CHUNK else zeros)
        sent += size
    return sent, time.monotonic() - started


class Session:
    """One prober's session: reads its frames, answers them, within Limits."""

    def __init__(self, rfile: BinaryIO, wfile: Any, limits: Limits = LIMITS):
        self.rfile = rfile
        self.wfile = wfile
        self.limits = limits
        self.received = 0
        self.sent = 0
        self.echoes = 0
        self.started = time.monotonic()
        self._upload_started: float | None = None
        self._scratch = memoryview(bytearray(CHUNK))

    def run(self) -> None:
        try:
            while (head := read_exact(self.rfile, HEADER.size)) is not None:
                op, length = HEADER.unpack(head)
                if time.monotonic() - self.started > self.limits.session_s:
                    raise Refused(f"the session passed its {self.limits.session_s:g} s")
                self._answer(op, length)
        except Refused as refused:
            log.info("probe session refused: %s", refused)
            self.wfile.write(frame(b"X", str(refused).encode()[:TEXT_MAX]))

    def _answer(self, op: bytes, length: int) -> None:
        if op == b"E":
            if length > ECHO_MAX:
                raise Refused(f"an echo of {length} bytes (at most {ECHO_MAX})")
            self.echoes += 1
            if self.echoes > self.limits.echoes:
                raise Refused(f"more than {self.limits.echoes} echoes")
            self.wfile.write(frame(b"E", read_exact(self.rfile, length) or b""))
        elif op == b"D":
            if length > FRAME_MAX:
                raise Refused(f"a data frame of {length} bytes (at most {FRAME_MAX})")
            if self._upload_started is None:
                self._upload_started = time.monotonic()
            self.received += length
            if self.received > self.limits.bytes:
                raise Refused(f"more than {self.limits.bytes} bytes uploaded")
            if time.monotonic() - self._upload_started > self.limits.seconds + 1:
                raise Refused(f"an upload longer than {self.limits.seconds:g} s")
            discard(self.rfile, length, self._scratch)
        elif op == b"F":
            if length:
                self._bad(op, length)
            elapsed = time.monotonic() - self._upload_started if self._upload_started else 0.0
            self.wfile.write(frame(b"R", RESULT.pack(self.received, elapsed)))
            self._upload_started = None
        elif op == b"S":
            if length != ASK.size:
                self._bad(op, length)
            wanted, seconds = ASK.unpack(read_exact(self.rfile, length) or b"")
            if not math.isfinite(seconds) or seconds <= 0:
                raise Refused("a download needs a positive number of seconds")
            budget = min(wanted, self.limits.bytes - self.sent)
            sent, elapsed = send_bounded(self.wfile.write, budget, min(seconds, self.limits.seconds))
            self.sent += sent
            self.wfile.write(frame(b"F", RESULT.pack(sent, elapsed)))
        else:
            self._bad(op, length)

    def _bad(self, op: bytes, length: int) -> None:
        raise Refused(f"unknown frame {op!r} of {length} bytes")


def serve(conn: Any, limits: Limits = LIMITS) -> Session:
    """Answer one prober on an upgraded connection (an http.serve Conn) until it closes, is
    idle, or passes a cap. Every read and write ends by the session's wall-clock bound, however
    slowly the prober's bytes arrive."""
    tune(conn.sock)
    conn.idle_s = limits.idle_s
    conn.deadline = time.monotonic() + limits.session_s
    session = Session(conn.reader, conn.writer, limits)
    try:
        session.run()
    except (OSError, EOFError) as exc:  # the prober went away, was idle too long, or ran out of time
        log.info("probe session ended: %s", type(exc).__name__)
    return session
