"""Snappy's block format, decoded in Python (the test receiver's, tests/support/lokireceiver.py):
it runs in the bench's own process, which then maps no compression library of its own; a
bench beside the agent would otherwise share the log worker's cramjam pages and keep them
resident. Strict: a body that is not exactly one valid block raises ValueError."""

from __future__ import annotations


def _varint(raw: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(raw) or shift > 28:
            raise ValueError("truncated or overlong length")
        byte = raw[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def uncompressed_length(raw: bytes) -> int:
    return _varint(raw, 0)[0]


def decompress(raw: bytes) -> bytes:
    """The block's bytes; ValueError for anything but one complete, consistent block."""
    length, at = _varint(raw, 0)
    out = bytearray()
    while at < len(raw):
        tag = raw[at]
        at += 1
        kind = tag & 3
        if kind == 0:  # a literal: its length in the tag, or in 1-4 bytes after it
            size = tag >> 2
            if size >= 60:
                extra = size - 59
                if at + extra > len(raw):
                    raise ValueError("truncated literal length")
                size = int.from_bytes(raw[at : at + extra], "little")
                at += extra
            size += 1
            if at + size > len(raw):
                raise ValueError("truncated literal")
            out += raw[at : at + size]
            at += size
            continue
        if kind == 1:
            if at >= len(raw):
                raise ValueError("truncated copy")
            size, offset = 4 + ((tag >> 2) & 7), ((tag >> 5) << 8) | raw[at]
            at += 1
        else:
            width = 2 if kind == 2 else 4
            if at + width > len(raw):
                raise ValueError("truncated copy")
            size, offset = (tag >> 2) + 1, int.from_bytes(raw[at : at + width], "little")
            at += width
        if offset == 0 or offset > len(out):
            raise ValueError(f"copy offset {offset} outside the {len(out)} bytes written")
        start = len(out) - offset
        if size <= offset:
            out += out[start : start + size]
        else:  # an overlapping copy repeats the last `offset` bytes
            pattern = bytes(out[start:])
            out += (pattern * (size // offset + 1))[:size]
        if len(out) > length:
            raise ValueError("more bytes than the block's length")
    if len(out) != length:
        raise ValueError(f"{len(out)} bytes decoded, the block says {length}")
    return bytes(out)
