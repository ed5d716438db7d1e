"""One log line on its way to Loki, and the rules every source applies to its text.

An Entry carries its Loki stream (labels), its source's own timestamp (so a replay after a
crash is an exact duplicate that Loki drops), the line, optional structured metadata, and
the source position that may be stored once Loki has accepted it.
"""

from __future__ import annotations

import re
from typing import Any

from faden_agent.protocol import MAX_LOG_LINE_BYTES

# Longest line shipped, in UTF-8 bytes (the size budget, protocol/__init__.py). Loki's default
# max_line_size is 256 KB and it rejects (400) longer lines; we cut well below that, keep
# the head and say how much was cut.
MAX_LINE_BYTES = MAX_LOG_LINE_BYTES
TRUNCATION_MARKER = " [faden-agent: truncated {cut} bytes]"

Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs: hashable, one per stream


class Entry:
    __slots__ = ("stream", "ts_ns", "line", "metadata", "source", "position", "size")

    stream: Labels
    ts_ns: int
    line: str
    metadata: dict[str, str] | None
    source: str  # the position key, e.g. "journal", "container:<id>:stdout", "file:<dev>:<ino>"
    position: Any  # what positions.py stores for `source` once this entry is accepted
    size: int  # bytes counted against the batch and backlog caps

    # By hand: the generated one called __post_init__ for the size, a second call for every
    # line of a flood, whose source (journald) knows the size already.
    def __init__(
        self,
        stream: Labels,
        ts_ns: int,
        line: str,
        metadata: dict[str, str] | None,
        source: str,
        position: Any,
        size: int = 0,
    ) -> None:
        self.stream = stream
        self.ts_ns = ts_ns
        self.line = line
        self.metadata = metadata
        self.source = source
        self.position = position
        self.size = size or len(line) + 64 + (sum(len(k) + len(v) for k, v in metadata.items()) if metadata else 0)

    def with_detail(self) -> str:
        """The line for a Loki that takes no structured metadata: the metadata kept after a
        tab as logfmt pairs (`disk ok\tunit=smartd.service pid=412`), so LogQL's `| logfmt`
        finds them and nothing is silently dropped."""
        if not self.metadata:
            return self.line
        return self.line + "\t" + " ".join(f"{key}={logfmt_value(value)}" for key, value in self.metadata.items())


_LOGFMT_PLAIN = re.compile(r'[^\s"=\\]+\Z')


def logfmt_value(value: str) -> str:
    """A logfmt value: as is when it needs no quotes, else quoted with \\ \" \\n \\t escaped."""
    if _LOGFMT_PLAIN.match(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def clean_line(raw: bytes | str) -> str:
    """Valid UTF-8 text of at most MAX_LINE_BYTES, the cut marked; never raises."""
    if isinstance(raw, str):
        if len(raw) * 4 <= MAX_LINE_BYTES:  # cheap path: cannot be too long
            return raw
        raw = raw.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_LINE_BYTES:
        end = MAX_LINE_BYTES
        while end > MAX_LINE_BYTES - 3 and raw[end] & 0xC0 == 0x80:
            end -= 1  # do not split a multi-byte character
        head = raw[:end].decode("utf-8", "replace")
        return head + TRUNCATION_MARKER.format(cut=len(raw) - end)
    return raw.decode("utf-8", "replace")
