"""The engine's streamed answers, each closable from another thread (close() ends a read
blocked on it): /events as one JSON object a line, and container logs as the frames of
Docker's multiplexed format (an 8-byte head: stream, 0, 0, 0, the payload's length) or, from
a TTY container, the raw bytes as they come. A cut, garbled or oversized stream ends the
iteration (`broken` says why): the caller reconnects, as after an engine restart."""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator
from typing import Any

import orjson

from faden_agent.http.client import Answer, HttpFailure

log = logging.getLogger(__name__)
MAX_EVENT_BYTES = 1 << 20  # an event is ~1 KiB with its labels
MAX_FRAME_BYTES = 8 << 20  # the engine cuts a log line into 16 KiB messages
_HEAD = struct.Struct(">BxxxL")


class _Stream:
    def __init__(self, answer: Answer):
        self.answer = answer
        self.broken = ""  # why the stream ended early, "" when it ended cleanly or was closed
        self._buffer = bytearray()
        self._reading = False  # a thread iterates: it closes the answer when it ends
        self._closed = False

    def _fill(self) -> bool:
        """More bytes into the buffer; False at the end (or a failure, said in `broken`)."""
        try:
            chunk = self.answer.read1()
        except HttpFailure as exc:
            self.broken = "" if self._closed else str(exc)
            return False
        self._buffer += chunk
        return bool(chunk)

    def close(self) -> None:
        self._closed = True
        self.answer.abort()  # the reading thread sees the end and closes the answer itself
        if not self._reading:
            self.answer.close()

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EventStream(_Stream):
    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._reading = True
        try:
            while True:
                end = self._buffer.find(b"\n")
                if end < 0:
                    if len(self._buffer) > MAX_EVENT_BYTES:
                        self.broken = f"an event over {MAX_EVENT_BYTES} bytes"
                        return
                    if not self._fill():
                        return
                    continue
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                if not line.strip():
                    continue
                try:
                    event = orjson.loads(line)
                except orjson.JSONDecodeError:
                    self.broken = f"an event that is not JSON: {line[:80]!r}"
                    return
                if isinstance(event, dict):
                    yield event
        finally:
            self.answer.close()


class LogStream(_Stream):
    """Each item: one frame's payload (multiplexed), or what arrived (tty)."""

    def __init__(self, answer: Answer, tty: bool):
        super().__init__(answer)
        self.tty = tty

    def __iter__(self) -> Iterator[bytes]:
        self._reading = True
        try:
            if self.tty:
                while self._fill():
                    yield bytes(self._buffer)
                    self._buffer.clear()
                return
            while True:
                while len(self._buffer) < _HEAD.size:
                    if not self._fill():
                        return
                _, size = _HEAD.unpack_from(self._buffer)
                if size > MAX_FRAME_BYTES:
                    self.broken = f"a log frame of {size} bytes (over {MAX_FRAME_BYTES})"
                    return
                while len(self._buffer) < _HEAD.size + size:
                    if not self._fill():
                        return
                payload = bytes(self._buffer[_HEAD.size : _HEAD.size + size])
                del self._buffer[: _HEAD.size + size]
                yield payload
        finally:
            self.answer.close()

    def read_all(self, max_bytes: int) -> bytes:
        """Every payload joined, the last max_bytes kept (a non-following read's whole answer)."""
        kept = bytearray()
        for payload in self:
            kept += payload
            if len(kept) > 2 * max_bytes:
                del kept[:-max_bytes]
        return bytes(kept[-max_bytes:])
