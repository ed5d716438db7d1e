"""journalctl's export format (`--output=export`), parsed a block at a time."""

from __future__ import annotations

import re
import struct

Record = dict[bytes, bytes]
# (__CURSOR, __REALTIME_TIMESTAMP, fields before MESSAGE, MESSAGE, fields after), all bytes,
# the fields as their `NAME=value\n` lines.
Shaped = tuple[bytes, bytes, bytes, bytes, bytes]
# NAME=value lines, none of them MESSAGE; names as journald allows them (another name: the
# dict way). Possessive (never given back): nothing after them could match what they took,
# and it saves a fifth of the match.
_TEXT_FIELDS = rb"((?:(?!MESSAGE=)[A-Z0-9_]++=[^\n]*+\n)*+)"
_SHAPED = re.compile(
    rb"__CURSOR=([^\n]++)\n__REALTIME_TIMESTAMP=([0-9]{1,20})\n__MONOTONIC_TIMESTAMP=[^\n]*+\n"
    rb"(?:__SEQNUM=[^\n]*+\n)?(?:__SEQNUM_ID=[^\n]*+\n)?"  # systemd >= 254 writes these
    + _TEXT_FIELDS
    + rb"MESSAGE=([^\n]*+)\n"
    + _TEXT_FIELDS
    + rb"\n"
)
_LENGTH = struct.Struct("<Q")


class ExportParser:
    """Feed it what journalctl wrote; it hands back the complete entries and keeps the rest."""

    def __init__(self) -> None:
        self.pending = b""  # the start of an entry not complete yet

    def feed(self, data: bytes) -> list[Record | Shaped]:
        buf = self.pending + data if self.pending else data
        records: list[Record | Shaped] = []
        pos = 0
        while True:
            pos = _fast(buf, pos, records)
            parsed = _careful(buf, pos)
            if parsed is None:
                break
            records.append(parsed[0])
            pos = parsed[1]
        self.pending = buf[pos:]
        return records


def _fast(buf: bytes, pos: int, records: list[Record | Shaped]) -> int:
    """Parse whole text-only entries from pos; the offset of the first one it cannot take."""
    match = _SHAPED.match
    while True:
        shaped = match(buf, pos)
        if shaped is not None:
            records.append(shaped.groups())  # type: ignore[arg-type]
            pos = shaped.end()
            continue
        end = buf.find(b"\n\n", pos)
        if end < 0:
            return pos
        piece = buf[pos:end]
        pairs = [line.split(b"=", 1) for line in piece.split(b"\n")]
        try:
            record = dict(pairs)
        except ValueError:  # a line without "=": a binary field (or a stray empty line)
            return pos
        if len(record) != len(pairs):  # a field written twice
            return pos
        records.append(record)
        pos = end + 2


def _careful(buf: bytes, pos: int) -> tuple[Record, int] | None:
    """One entry at pos, field by field: (record, offset after it), None when incomplete.
    A field written twice keeps both values, joined by a newline (as the JSON reader did)."""
    record: Record = {}
    size = len(buf)
    while True:
        newline = buf.find(b"\n", pos)
        if newline < 0:
            return None
        if newline == pos:  # the empty line: end of the entry (or a stray one before it)
            if record:
                return record, pos + 1
            pos += 1
            continue
        line = buf[pos:newline]
        name, equals, value = line.partition(b"=")
        if equals:
            pos = newline + 1
        else:
            start = newline + 1 + _LENGTH.size
            if size < start:
                return None
            (length,) = _LENGTH.unpack_from(buf, newline + 1)
            if size < start + length + 1:
                return None
            value = buf[start : start + length]
            pos = start + length + 1  # and the newline after the value
        record[name] = record[name] + b"\n" + value if name in record else value


def text_fields(lines: bytes) -> Record:
    """The `NAME=value\\n` lines of a Shaped entry as a record; a field written twice keeps
    both values, joined by a newline (as _careful does)."""
    record: Record = {}
    for line in lines.split(b"\n")[:-1]:
        name, _, value = line.partition(b"=")
        record[name] = record[name] + b"\n" + value if name in record else value
    return record
