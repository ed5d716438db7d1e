"""A strict decoder of Loki's protobuf push body (snappy block + logproto.PushRequest) into
the JSON push form, for the test receiver: unknown fields are skipped as Loki's gogo code
does (so `keep_metadata=False` drops field 3 silently, as Loki 2.8 does); anything
malformed raises ValueError.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from tests.support import snappyblock

_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*("(?:[^"\\]|\\.)*")\s*(,|(?=\}))')


def decode_push(raw: bytes, max_bytes: int, keep_metadata: bool) -> dict[str, Any] | None:
    """The push as {"streams": [{"stream", "values"}]}; None when it inflates past max_bytes."""
    try:
        if snappyblock.uncompressed_length(raw) > max_bytes:
            return None
        body = snappyblock.decompress(raw)
    except ValueError as exc:
        raise ValueError(f"invalid snappy body: {exc}") from None
    streams = []
    for number, value in _fields(body):
        if number == 1:
            streams.append(_stream(_bytes(value), keep_metadata))
    return {"streams": streams}


def parse_labels(text: str) -> dict[str, str]:
    """{a="b", c="d"} as Loki's parser reads it (Go-quoted values)."""
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError(f"parse error: labels {text[:80]!r} are not a selector")
    labels, at, inner = {}, 1, text
    while at < len(inner) - 1:
        match = _LABEL.match(inner, at)
        if match is None:
            raise ValueError(f"parse error at {at} in labels {text[:80]!r}")
        labels[match[1]] = orjson.loads(match[2])
        at = match.end()
    return labels


def _stream(body: bytes, keep_metadata: bool) -> dict[str, Any]:
    labels, values = None, []
    for number, value in _fields(body):
        if number == 1:
            labels = parse_labels(_bytes(value).decode("utf-8"))
        elif number == 2:
            values.append(_entry(_bytes(value), keep_metadata))
    if labels is None:
        raise ValueError("a stream without labels")
    return {"stream": labels, "values": values}


def _entry(body: bytes, keep_metadata: bool) -> list[Any]:
    ts, line, metadata = None, "", {}
    for number, value in _fields(body):
        if number == 1:
            seconds = nanos = 0
            for n, v in _fields(_bytes(value)):
                seconds, nanos = (_int(v), nanos) if n == 1 else (seconds, _int(v)) if n == 2 else (seconds, nanos)
            ts = str(seconds * 1_000_000_000 + nanos)
        elif number == 2:
            line = _bytes(value).decode("utf-8", "replace")
        elif number == 3 and keep_metadata:
            pair = dict(_fields(_bytes(value)))
            metadata[_bytes(pair.get(1, b"")).decode()] = _bytes(pair.get(2, b"")).decode("utf-8", "replace")
    if ts is None:
        raise ValueError("an entry without a timestamp")
    return [ts, line, metadata] if metadata else [ts, line]


def _bytes(value: Any) -> bytes:
    if not isinstance(value, bytes):
        raise ValueError("wire type mismatch: expected length-delimited")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, int):
        raise ValueError("wire type mismatch: expected varint")
    return value


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    out, at = [], 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            out.append((number, value))
        elif wire == 2:
            length, at = _varint(data, at)
            if at + length > len(data):
                raise ValueError("unexpected EOF")
            out.append((number, data[at : at + length]))
            at += length
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        else:
            raise ValueError(f"illegal wire type {wire}")
    if at != len(data):
        raise ValueError("unexpected EOF")
    return out


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift >= 64:
            raise ValueError("unexpected EOF" if at >= len(data) else "integer overflow")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
