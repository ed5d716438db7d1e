"""The message format on every socket: {"v": 1, "type": str, "body": object, "ts": float}.

Version first so a newer peer can be refused with a clear reason instead of misread.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import orjson

from faden_agent.protocol import MAX_IPC_MESSAGE_BYTES

ENVELOPE_VERSION = 1
MAX_MESSAGE_BYTES = MAX_IPC_MESSAGE_BYTES  # the size budget's IPC layer (protocol/__init__.py)


class EnvelopeError(ValueError):
    pass


class _Message(NamedTuple):
    type: str
    body: Any
    ts: float


class Message(_Message):
    """One received message, immutable; `ts` the sender's time, now when not given. A tuple:
    orjson refuses it, so only its fields go to the wire (encode)."""

    __slots__ = ()

    def __new__(cls, type: str, body: Any = None, ts: float | None = None) -> Message:
        return super().__new__(cls, type, body, time.time() if ts is None else ts)


def encode(msg_type: str, body: Any = None) -> bytes:
    """The frame; EnvelopeError when it is over the limit (the receiver would never see it)."""
    frame = orjson.dumps({"v": ENVELOPE_VERSION, "type": msg_type, "body": body, "ts": time.time()})
    if len(frame) > MAX_MESSAGE_BYTES:
        raise EnvelopeError(f"{msg_type} message of {len(frame)} bytes exceeds {MAX_MESSAGE_BYTES}")
    return frame


def decode(frame: bytes) -> Message:
    if len(frame) > MAX_MESSAGE_BYTES:
        raise EnvelopeError(f"message of {len(frame)} bytes exceeds {MAX_MESSAGE_BYTES}")
    try:
        data = orjson.loads(frame)
    except orjson.JSONDecodeError as exc:
        raise EnvelopeError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise EnvelopeError("envelope is not an object")
    if data.get("v") != ENVELOPE_VERSION:
        raise EnvelopeError(f"unsupported envelope version {data.get('v')!r}")
    msg_type = data.get("type")
    if not isinstance(msg_type, str) or not msg_type:
        raise EnvelopeError("envelope has no type")
    ts = data.get("ts")
    return Message(type=msg_type, body=data.get("body"), ts=ts if isinstance(ts, (int, float)) else time.time())
