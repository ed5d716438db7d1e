"""D-Bus message marshalling (little-endian), as far as the agent needs it: the basic types,
arrays, structs, dict entries and variants (a variant's value is given as (signature, value)),
unix fds as indexes into the message's fd list. A malformed message raises WireError.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

METHOD_CALL, METHOD_RETURN, ERROR, SIGNAL = 1, 2, 3, 4
NO_REPLY_EXPECTED = 0x1
PATH, INTERFACE, MEMBER, ERROR_NAME, REPLY_SERIAL, DESTINATION, SENDER, SIGNATURE, UNIX_FDS = range(1, 10)
_FIELD_TYPES = {PATH: "o", INTERFACE: "s", MEMBER: "s", ERROR_NAME: "s", REPLY_SERIAL: "u"}
_FIELD_TYPES.update({DESTINATION: "s", SENDER: "s", SIGNATURE: "g", UNIX_FDS: "u"})
MAX_MESSAGE_BYTES = 1 << 20  # far above anything logind sends; the spec's own limit is 128 MiB
_FIXED = {"y": "B", "b": "I", "n": "h", "q": "H", "i": "i", "u": "I", "x": "q", "t": "Q", "d": "d", "h": "I"}
_ALIGN = {"y": 1, "b": 4, "n": 2, "q": 2, "i": 4, "u": 4, "x": 8, "t": 8, "d": 8, "h": 4, "s": 4, "o": 4}
_ALIGN.update({"g": 1, "v": 1, "a": 4, "(": 8, "{": 8})


class WireError(ValueError):
    pass


@dataclass
class Message:
    type: int
    serial: int = 0
    flags: int = 0
    fields: dict[int, Any] = field(default_factory=dict)
    body: list[Any] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)

    @property
    def member(self) -> str | None:
        return self.fields.get(MEMBER)

    @property
    def interface(self) -> str | None:
        return self.fields.get(INTERFACE)

    @property
    def signature(self) -> str:
        return self.fields.get(SIGNATURE, "")


def split_types(signature: str) -> list[str]:
    """'sa{sv}(ii)' -> ['s', 'a{sv}', '(ii)']."""
    out, i = [], 0
    while i < len(signature):
        end = _type_end(signature, i)
        out.append(signature[i:end])
        i = end
    return out


def _type_end(sig: str, i: int) -> int:
    if i >= len(sig):
        raise WireError(f"signature {sig!r} ends early")
    c = sig[i]
    if c == "a":
        return _type_end(sig, i + 1)
    if c in "({":
        close = ")" if c == "(" else "}"
        j = i + 1
        while j < len(sig) and sig[j] != close:
            j = _type_end(sig, j)
        if j >= len(sig):
            raise WireError(f"signature {sig!r}: {c} is not closed")
        return j + 1
    if c in _ALIGN:
        return i + 1
    raise WireError(f"signature {sig!r}: unknown type {c!r}")


class _Writer:
    def __init__(self) -> None:
        self.buf = bytearray()

    def pad(self, align: int) -> None:
        self.buf += b"\0" * (-len(self.buf) % align)

    def write(self, sig: str, value: Any) -> None:
        c = sig[0]
        self.pad(_ALIGN[c])
        if c in _FIXED:
            self.buf += struct.pack("<" + _FIXED[c], int(value) if c != "d" else float(value))
        elif c in "so":
            data = value.encode()
            self.buf += struct.pack("<I", len(data)) + data + b"\0"
        elif c == "g":
            data = value.encode()
            self.buf += struct.pack("<B", len(data)) + data + b"\0"
        elif c == "v":
            inner, inner_value = value
            self.write("g", inner)
            self.write(inner, inner_value)
        elif c == "a":
            self._array(sig[1:], value)
        else:  # ( or {: a struct or a dict entry, given as a sequence
            for part, item in zip(split_types(sig[1:-1]), value, strict=True):
                self.write(part, item)

    def _array(self, elem: str, value: Any) -> None:
        at = len(self.buf)
        self.buf += b"\0\0\0\0"
        self.pad(_ALIGN[elem[0]])
        start = len(self.buf)
        items = value.items() if isinstance(value, dict) else value
        for item in items:
            self.write(elem, item)
        struct.pack_into("<I", self.buf, at, len(self.buf) - start)


class _Reader:
    def __init__(self, data: bytes, pos: int = 0):
        self.data, self.pos = data, pos

    def align(self, n: int) -> None:
        self.pos += -self.pos % n

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise WireError("message ends early")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def read(self, sig: str) -> Any:
        c = sig[0]
        self.align(_ALIGN[c])
        if c in _FIXED:
            fmt = "<" + _FIXED[c]
            value = struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
            return bool(value) if c == "b" else value
        if c in "so":
            (size,) = struct.unpack("<I", self.take(4))
            text = self.take(size + 1)[:-1]
            return text.decode("utf-8", "replace")
        if c == "g":
            (size,) = struct.unpack("<B", self.take(1))
            return self.take(size + 1)[:-1].decode("ascii", "replace")
        if c == "v":
            inner = self.read("g")
            if len(split_types(inner)) != 1:
                raise WireError(f"a variant holds one type, not {inner!r}")
            return (inner, self.read(inner))
        if c == "a":
            (size,) = struct.unpack("<I", self.take(4))
            elem = sig[1:]
            self.align(_ALIGN[elem[0]])
            end = self.pos + size
            if end > len(self.data):
                raise WireError("array runs past the message")
            items = []
            while self.pos < end:
                items.append(self.read(elem))
            return dict(items) if elem[0] == "{" else items
        return tuple(self.read(part) for part in split_types(sig[1:-1]))


def encode(message: Message) -> bytes:
    """The message's bytes (header, fields, body); UNIX_FDS is set from len(message.fds)."""
    body = _Writer()
    for part, value in zip(split_types(message.signature), message.body, strict=True):
        body.write(part, value)
    fields = dict(message.fields)
    if message.fds:
        fields[UNIX_FDS] = len(message.fds)
    head = _Writer()
    head.buf += struct.pack("<cBBBII", b"l", message.type, message.flags, 1, len(body.buf), message.serial)
    head.write("a(yv)", [(code, (_FIELD_TYPES[code], value)) for code, value in sorted(fields.items())])
    head.pad(8)
    return bytes(head.buf + body.buf)


def message_size(data: bytes) -> int | None:
    """The size of the message at the start of `data`; None while its fixed header is incomplete."""
    if len(data) < 16:
        return None
    if data[:1] != b"l":
        raise WireError(f"only little-endian messages are read, not {data[:1]!r}")
    body_len, _, fields_len = struct.unpack_from("<III", data, 4)
    size = 16 + fields_len + (-(16 + fields_len) % 8) + body_len
    if size > MAX_MESSAGE_BYTES:
        raise WireError(f"a message of {size} bytes (over {MAX_MESSAGE_BYTES})")
    return size


def decode(data: bytes) -> Message:
    """One whole message (message_size bytes) without its fds."""
    _, kind, flags, _, body_len, serial = struct.unpack_from("<cBBBII", data, 0)
    reader = _Reader(data, 12)
    fields = {code: value for code, (_, value) in reader.read("a(yv)")}
    reader.align(8)
    body_reader = _Reader(data[reader.pos : reader.pos + body_len])
    signature = fields.get(SIGNATURE, "")
    body = [body_reader.read(part) for part in split_types(signature)]
    return Message(kind, serial, flags, fields, body)
