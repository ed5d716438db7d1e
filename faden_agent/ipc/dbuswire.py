"""D-Bus message marshalling, as far as the agent needs it: the basic types, arrays, structs,
dict entries and variants (a variant's value is given as (signature, value)), unix fds as
indexes into the message's fd list. Written little-endian, read in either byte order. Total:
any malformed input (bytes, signature, header field) raises WireError and nothing else.
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


MAX_SIGNATURE = 255
MAX_DEPTH = 32  # of arrays, and of structs, each (the spec's limits)
_BASIC = set("ybnqiuxtdhsog")


def split_types(signature: str) -> list[str]:
    """'sa{sv}(ii)' -> ['s', 'a{sv}', '(ii)']; WireError for anything the spec does not allow
    (an empty struct, a dict entry outside an array or not of a basic key and one value, too deep)."""
    if not isinstance(signature, str) or len(signature) > MAX_SIGNATURE:
        raise WireError(f"signature {str(signature)[:60]!r} is not a signature of at most {MAX_SIGNATURE} bytes")
    out, i = [], 0
    while i < len(signature):
        end = _type_end(signature, i, 0, 0)
        out.append(signature[i:end])
        i = end
    return out


def _type_end(sig: str, i: int, arrays: int, structs: int, in_array: bool = False) -> int:
    if i >= len(sig):
        raise WireError(f"signature {sig!r} ends early")
    if arrays > MAX_DEPTH or structs > MAX_DEPTH:
        raise WireError(f"signature {sig[:60]!r} nests deeper than {MAX_DEPTH}")
    c = sig[i]
    if c == "a":
        return _type_end(sig, i + 1, arrays + 1, structs, in_array=True)
    if c == "(":
        j = i + 1
        while j < len(sig) and sig[j] != ")":
            j = _type_end(sig, j, arrays, structs + 1)
        if j >= len(sig) or j == i + 1:
            raise WireError(f"signature {sig[:60]!r}: a struct is empty or not closed")
        return j + 1
    if c == "{":
        if not in_array:
            raise WireError(f"signature {sig[:60]!r}: a dict entry outside an array")
        if i + 1 >= len(sig) or sig[i + 1] not in _BASIC:
            raise WireError(f"signature {sig[:60]!r}: a dict entry's key is not a basic type")
        j = _type_end(sig, i + 2, arrays, structs + 1)
        if j >= len(sig) or sig[j] != "}":
            raise WireError(f"signature {sig[:60]!r}: a dict entry holds other than a key and one value")
        return j + 1
    if c in _ALIGN:
        return i + 1
    raise WireError(f"signature {sig[:60]!r}: unknown type {c!r}")


class _Writer:
    def __init__(self, order: str = "<") -> None:
        self.buf = bytearray()
        self.order = order

    def pad(self, align: int) -> None:
        self.buf += b"\0" * (-len(self.buf) % align)

    def write(self, sig: str, value: Any) -> None:
        c = sig[0]
        self.pad(_ALIGN[c])
        if c in _FIXED:
            self.buf += struct.pack(self.order + _FIXED[c], int(value) if c != "d" else float(value))
        elif c in "so":
            data = value.encode()
            self.buf += struct.pack(self.order + "I", len(data)) + data + b"\0"
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
        struct.pack_into(self.order + "I", self.buf, at, len(self.buf) - start)


def _as_dict(items: list[Any]) -> dict[Any, Any]:
    try:
        return dict(items)
    except TypeError:  # a key that cannot be one (a variant's (signature, value) is a tuple: fine)
        raise WireError("a dict entry's key cannot be a key") from None


class _Reader:
    variants = 0

    def __init__(self, data: bytes, pos: int = 0, order: str = "<"):
        self.data, self.pos, self.order = data, pos, order

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
            fmt = self.order + _FIXED[c]
            value = struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
            return bool(value) if c == "b" else value
        if c in "so":
            (size,) = struct.unpack(self.order + "I", self.take(4))
            text = self.take(size + 1)[:-1]
            return text.decode("utf-8", "replace")
        if c == "g":
            (size,) = struct.unpack("<B", self.take(1))
            return self.take(size + 1)[:-1].decode("ascii", "replace")
        if c == "v":
            self.variants += 1
            if self.variants > MAX_DEPTH:
                raise WireError(f"variants nest deeper than {MAX_DEPTH}")
            try:
                inner = self.read("g")
                if len(split_types(inner)) != 1:
                    raise WireError(f"a variant holds one type, not {inner!r}")
                return (inner, self.read(inner))
            finally:
                self.variants -= 1
        if c == "a":
            (size,) = struct.unpack(self.order + "I", self.take(4))
            elem = sig[1:]
            self.align(_ALIGN[elem[0]])
            end = self.pos + size
            if end > len(self.data):
                raise WireError("array runs past the message")
            items = []
            while self.pos < end:
                at = self.pos
                items.append(self.read(elem))
                if self.pos == at:  # split_types refuses empty structs; never spin on one
                    raise WireError(f"an array of {elem!r} whose element takes no bytes")
            if self.pos != end:
                raise WireError("an array's last element runs past its length")
            return _as_dict(items) if elem[0] == "{" else items
        return tuple(self.read(part) for part in split_types(sig[1:-1]))


def encode(message: Message, order: str = "<") -> bytes:
    """The message's bytes (header, fields, body; little-endian unless order is ">"); UNIX_FDS
    is set from len(message.fds)."""
    body = _Writer(order)
    for part, value in zip(split_types(message.signature), message.body, strict=True):
        body.write(part, value)
    fields = dict(message.fields)
    if message.fds:
        fields[UNIX_FDS] = len(message.fds)
    head = _Writer(order)
    mark = b"l" if order == "<" else b"B"
    head.buf += struct.pack(order + "cBBBII", mark, message.type, message.flags, 1, len(body.buf), message.serial)
    head.write("a(yv)", [(code, (_FIELD_TYPES[code], value)) for code, value in sorted(fields.items())])
    head.pad(8)
    return bytes(head.buf + body.buf)


_ORDERS = {b"l": "<", b"B": ">"}
_REQUIRED = {
    METHOD_CALL: {PATH, MEMBER},
    METHOD_RETURN: {REPLY_SERIAL},
    ERROR: {ERROR_NAME, REPLY_SERIAL},
    SIGNAL: {PATH, INTERFACE, MEMBER},
}


def message_size(data: bytes) -> int | None:
    """The size of the message at the start of `data`; None while its fixed header is incomplete.
    WireError when the stream cannot be followed (not a D-Bus header, over MAX_MESSAGE_BYTES)."""
    if len(data) < 16:
        return None
    order = _ORDERS.get(bytes(data[:1]))
    if order is None or data[3] != 1:
        raise WireError(f"not a D-Bus message header (byte order {bytes(data[:1])!r}, version {data[3]})")
    body_len, _, fields_len = struct.unpack_from(order + "III", data, 4)
    size = 16 + fields_len + (-(16 + fields_len) % 8) + body_len
    if size > MAX_MESSAGE_BYTES:
        raise WireError(f"a message of {size} bytes (over {MAX_MESSAGE_BYTES})")
    return size


def decode(data: bytes) -> Message:
    """One whole message (message_size bytes) without its fds; WireError for anything malformed."""
    try:
        return _decode(data)
    except (struct.error, RecursionError, UnicodeError) as exc:
        raise WireError(f"a malformed message: {exc.__class__.__name__}: {str(exc)[:120]}") from None


def _decode(data: bytes) -> Message:
    if message_size(data) != len(data):
        raise WireError("the message's length is not what its header says")
    order = _ORDERS[bytes(data[:1])]
    _, kind, flags, _, body_len, serial = struct.unpack_from(order + "cBBBII", data, 0)
    if kind not in (METHOD_CALL, METHOD_RETURN, ERROR, SIGNAL) or serial == 0:
        raise WireError(f"message type {kind} or serial {serial} is not allowed")
    reader = _Reader(data, 12, order)
    fields: dict[int, Any] = {}
    for code, (signature, value) in reader.read("a(yv)"):
        if code in _FIELD_TYPES and signature != _FIELD_TYPES[code]:
            raise WireError(f"header field {code} is of type {signature!r}, not {_FIELD_TYPES[code]!r}")
        if code in _FIELD_TYPES:  # unknown fields are ignored, as the spec says
            fields[code] = value
    missing = _REQUIRED[kind] - fields.keys()
    if missing:
        raise WireError(f"a message of type {kind} without header fields {sorted(missing)}")
    reader.align(8)
    if reader.pos + body_len != len(data):
        raise WireError("the body is not where the header says")
    body_reader = _Reader(data[reader.pos :], 0, order)
    body = [body_reader.read(part) for part in split_types(fields.get(SIGNATURE, ""))]
    if body_reader.pos != body_len:
        raise WireError("the body's length is not what its signature reads")
    return Message(kind, serial, flags, fields, body)
