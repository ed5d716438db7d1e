"""Socket construction and request/reply, the only socket code workers use.

Every socket gets LINGER and HWM set on purpose: a dead peer must never make close() or
exit hang (linger), and a stuck peer must never grow our memory without bound (HWM).
A fresh zmq.Context is made per process (never inherited across fork).
"""

from __future__ import annotations

import os
from typing import Any

import zmq

from faden_agent.ipc.envelope import MAX_MESSAGE_BYTES, Message, decode, encode

DEFAULT_LINGER_MS = 0
DEFAULT_HWM = 1000

_context: zmq.Context | None = None
_context_pid: int | None = None


def context() -> zmq.Context:
    """This process's context; a forked child gets its own instead of the parent's."""
    global _context, _context_pid
    if _context is None or _context_pid != os.getpid():
        _context = zmq.Context()
        _context_pid = os.getpid()
    return _context


class Channel:
    """One ZeroMQ socket with the envelope on top."""

    def __init__(self, kind: int, *, hwm: int = DEFAULT_HWM, linger_ms: int = DEFAULT_LINGER_MS):
        self.socket = context().socket(kind)
        self.socket.setsockopt(zmq.LINGER, linger_ms)
        self.socket.setsockopt(zmq.SNDHWM, hwm)
        self.socket.setsockopt(zmq.RCVHWM, hwm)
        # Over-size frames are dropped by libzmq before they are read (or buffered whole).
        self.socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        if kind == zmq.REQ:
            # A timed-out request must not wedge the socket in its send/recv state machine.
            self.socket.setsockopt(zmq.REQ_RELAXED, 1)
            self.socket.setsockopt(zmq.REQ_CORRELATE, 1)

    @classmethod
    def bind(cls, kind: int, address: str, **opts: Any) -> Channel:
        channel = cls(kind, **opts)
        path = address.removeprefix("ipc://")
        if address.startswith("ipc://") and os.path.exists(path):
            os.unlink(path)  # a stale socket file from a killed predecessor
        channel.socket.bind(address)
        return channel

    @classmethod
    def connect(cls, kind: int, address: str, **opts: Any) -> Channel:
        channel = cls(kind, **opts)
        channel.socket.connect(address)
        return channel

    def send(self, msg_type: str, body: Any = None, *, block: bool = True) -> bool:
        """Send one message; with block=False a full queue drops it and returns False."""
        try:
            self.socket.send(encode(msg_type, body), 0 if block else zmq.NOBLOCK)
            return True
        except zmq.Again:
            return False

    def recv(self, timeout_s: float | None = None) -> Message | None:
        """One message, or None when nothing arrives within timeout_s."""
        if timeout_s is not None and not self.socket.poll(int(timeout_s * 1000)):
            return None
        return decode(self.socket.recv())

    def close(self) -> None:
        self.socket.close(linger=0)


def send_last_word(address: str, msg_type: str, body: Any = None, timeout_s: float = 1.0) -> bool:
    """One message that must leave before the process exits (os._exit drops what ZeroMQ still
    queues): sent on a context of its own, whose term() waits until the message is out or
    timeout_s has passed. False when it was not sent in time."""
    own = zmq.Context()
    try:
        socket = own.socket(zmq.PUSH)
        socket.setsockopt(zmq.LINGER, int(timeout_s * 1000))
        socket.setsockopt(zmq.SNDTIMEO, int(timeout_s * 1000))
        socket.connect(address)
        try:
            socket.send(encode(msg_type, body))
        except zmq.Again:
            return False
        finally:
            socket.close()
        return True
    finally:
        own.term()


def request(address: str, msg_type: str, body: Any = None, timeout_s: float = 1.0) -> Message | None:
    """One-shot request/reply; None when nobody answers in time."""
    channel = Channel.connect(zmq.REQ, address)
    try:
        channel.send(msg_type, body)
        return channel.recv(timeout_s)
    finally:
        channel.close()


class Requester:
    """A kept REQ connection, for a thread that asks one peer again and again (the heartbeat's
    `ps`): a request() per question sets up and tears down a connection each time, about ten
    wake-ups of both processes' ZeroMQ threads. One thread only."""

    def __init__(self, address: str):
        self.address = address
        self._channel: Channel | None = None

    def ask(self, msg_type: str, body: Any = None, timeout_s: float = 1.0) -> Message | None:
        """The reply, or None when none comes in time (a late one is dropped: REQ_CORRELATE)."""
        if self._channel is None:
            self._channel = Channel.connect(zmq.REQ, self.address)
        if not self._channel.send(msg_type, body, block=False):
            return None
        return self._channel.recv(timeout_s)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
