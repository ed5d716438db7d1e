"""Joins continuation lines (a traceback, an indented block, unprefixed lines after a prefixed
one) to the line they continue, per stream, into one entry with the head's level.
A Joiner is pure: the caller feeds lines and positions, asks for what is due after the wait
bound and flushes at a stream's end; past max_lines or max_bytes an entry is cut and the next
piece starts with CONTINUED.
"""

from __future__ import annotations

from typing import Any

from faden_agent.workers.logs.entry import MAX_LINE_BYTES
from faden_agent.workers.logs.shapes import TRACEBACK_STARTS, UNKNOWN, shape

MAX_LINES = 500
MAX_BYTES = MAX_LINE_BYTES  # 64 KiB: what one Loki line may hold here anyway
WAIT_S = 1.0  # after the last line of an entry, before it goes out without a successor
CONTINUED = "[faden-agent: continues the entry before] "
SEVERE = frozenset({"warning", "error", "crit", "alert", "emerg"})


class Joined:
    __slots__ = ("text", "ts_ns", "level", "first_position", "last_position", "lines")

    def __init__(self, text: str, ts_ns: int, level: str, first_position: Any, last_position: Any, lines: int) -> None:
        self.text = text
        self.ts_ns = ts_ns  # the head's
        self.level = level
        self.first_position = first_position  # where the head was read: a resume point that reads the entry again whole
        self.last_position = last_position  # after its last line
        self.lines = lines


class _Group:
    __slots__ = (
        "process",
        "header",
        "prefixed",
        "level",
        "ts_ns",
        "first_position",
        "last_position",
        "lines",
        "bytes",
        "awaiting_exception",
        "traceback_seen",
    )

    def __init__(
        self,
        process: str,
        header: str,
        prefixed: bool,
        level: str,
        ts_ns: int,
        first_position: Any,
        last_position: Any,
        lines: list[str] | None = None,
        bytes: int = 0,
        awaiting_exception: bool = False,
        traceback_seen: bool = False,
    ) -> None:
        self.process = process
        self.header = header
        self.prefixed = prefixed
        self.level = level
        self.ts_ns = ts_ns
        self.first_position = first_position
        self.last_position = last_position
        self.lines: list[str] = [] if lines is None else lines
        self.bytes = bytes
        self.awaiting_exception = awaiting_exception  # a traceback's frames seen, its "ValueError: ..." line not yet
        self.traceback_seen = traceback_seen


def _size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


class Joiner:
    def __init__(
        self, enabled: bool = True, wait_s: float = WAIT_S, max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES
    ):
        self.enabled = enabled
        self.wait_s = wait_s
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self.group: _Group | None = None
        self.last_added = 0.0
        self.cuts = 0  # entries cut at a size bound

    @property
    def deadline(self) -> float | None:
        """When the entry held now is due (monotonic seconds); None when none is held."""
        return None if self.group is None else self.last_added + self.wait_s

    def add(self, text: str, ts_ns: int, position: Any, now: float) -> list[Joined]:
        """Feed one line (already cleaned and bounded); returns the entries it completed."""
        out: list[Joined] = []
        found = shape(text)
        body, prefixed, repeated = found.body, found.prefixed, False
        group = self.group
        if group is not None and found.header and found.header == group.header:
            # The header again: the same record's next line, or the next record from the same
            # place within the same second; only a traceback's or an indented line continues.
            body, prefixed, repeated = body[len(found.header) :], True, True
        if group is not None and self.enabled and self._continues(group, found.process, prefixed, repeated, body):
            size = _size(text) + 1
            if len(group.lines) >= self.max_lines or group.bytes + size > self.max_bytes:
                self.cuts += 1
                out.append(self._close())
                self.group = self._continued(group, text, ts_ns, position)
            else:
                group.lines.append(text)
                group.bytes += size
                group.last_position = position
            self._mark_traceback(self.group, body)
        else:
            if group is not None:
                out.append(self._close())
            level = found.level
            if level == UNKNOWN and body.startswith(TRACEBACK_STARTS[0]):
                level = "error"  # an uncaught exception, printed bare to stderr
            self.group = self._start(found.process, found.header, found.prefixed, level, text, ts_ns, position)
            self._mark_traceback(self.group, body[len(found.header) :])
            if not self.enabled:
                out.append(self._close())
        self.last_added = now
        return out

    def due(self, now: float) -> Joined | None:
        """The entry held, once the wait bound has passed since its last line."""
        if self.group is not None and now >= self.last_added + self.wait_s:
            return self._close()
        return None

    def flush(self) -> Joined | None:
        """The entry held, whatever the time (the stream ended, its file closes)."""
        return self._close() if self.group is not None else None

    @staticmethod
    def _continues(group: _Group, process: str, prefixed: bool, repeated: bool, body: str) -> bool:
        if process != group.process:
            return False  # another worker's output, interleaved
        if body.startswith(TRACEBACK_STARTS[0]):
            # Logged with its exception (logger.exception: a severe head), or the next one of a
            # chain; after an INFO line it is an uncaught exception of its own.
            return group.level in SEVERE or group.traceback_seen
        if not body or body[0] in " \t" or body.startswith(TRACEBACK_STARTS):
            return True
        if repeated and group.awaiting_exception:
            return True  # "ValueError: ..." after the frames, under the same header
        if prefixed:
            return False
        return group.prefixed or group.awaiting_exception

    @staticmethod
    def _mark_traceback(group: _Group | None, body: str) -> None:
        if group is None:
            return
        if body.startswith(TRACEBACK_STARTS[0]):
            group.awaiting_exception = group.traceback_seen = True
        elif body and body[0] not in " \t" and not body.startswith(TRACEBACK_STARTS):
            group.awaiting_exception = False  # the exception line itself

    @staticmethod
    def _start(process: str, header: str, prefixed: bool, level: str, text: str, ts_ns: int, position: Any) -> _Group:
        return _Group(process, header, prefixed, level, ts_ns, position, position, [text], _size(text))

    @staticmethod
    def _continued(cut: _Group, text: str, ts_ns: int, position: Any) -> _Group:
        """The group that goes on after `cut` reached its bound: its process, header, level and
        traceback state, its text marked CONTINUED."""
        text = CONTINUED + text
        return _Group(
            cut.process,
            cut.header,
            True,
            cut.level,
            ts_ns,
            position,
            position,
            [text],
            _size(text),
            cut.awaiting_exception,
            cut.traceback_seen,
        )

    def _close(self) -> Joined:
        group = self.group
        assert group is not None
        self.group = None
        return Joined(
            "\n".join(group.lines),
            group.ts_ns,
            group.level,
            group.first_position,
            group.last_position,
            len(group.lines),
        )
