"""Tailing and shipping Ray log files (the Ray source's lower half): each file open by
device+inode, read one chunk per file in turn within its container's read budget, rotated-away
files drained to their end, lines joined into entries for the backlog; at most
MAX_OPEN_PER_CONTAINER files open per container (the least recently written idle one makes room).
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Protocol

from faden_agent.workers.logs.backlog import Backlog
from faden_agent.workers.logs.entry import MAX_LINE_BYTES, Entry, clean_line
from faden_agent.workers.logs.multiline import Joined
from faden_agent.workers.logs.positions import Positions
from faden_agent.workers.logs.sources import ROTATED_BEFORE_READ
from faden_agent.workers.logs.sources.ray import mount
from faden_agent.workers.logs.sources.ray.fileends import FileEnds, position_key
from faden_agent.workers.logs.sources.ray.tail import ReadBudget, Tail, parse_ray_ts_ns

POLL_S = 0.5  # at most one round this often; the poll interval where inotify cannot serve
READ_CHUNK = 256 * 1024
READ_RATE_BYTES = 4 * 1024 * 1024  # per container and second (one second's worth may be saved up)
MAX_OPEN_PER_CONTAINER = 128  # files tailed at once per container (Ray's own: ~3 per worker process)
MAX_COUNT_BYTES = 64 * 1024 * 1024  # read at most this much to count unshipped lines (then: at least)
log = logging.getLogger(__name__)
Ident = tuple[int, int]  # a file's (device, inode)


class Losses(Protocol):
    """The source's account of lines gone before they were read (Source.lost)."""

    def __call__(self, count: int, reason: str, at_least: bool = False) -> None: ...


class RayTails:
    """The files tailed, each container's read budget and the ends of rotated-away files.
    Every line taken counts through `line_read`, every loss through `lost` (the source's
    account); a file no longer tailed gives up its watch through `unwatch_file`."""

    def __init__(
        self,
        backlog: Backlog,
        positions: Positions,
        stop_event: threading.Event,
        line_read: Callable[[], None],
        lost: Losses,
        unwatch_file: Callable[[int | None], None],
    ) -> None:
        self.backlog = backlog
        self.positions = positions
        self.stop_event = stop_event
        self.line_read = line_read
        self.lost = lost
        self.unwatch_file = unwatch_file
        self.tails: dict[Ident, Tail] = {}
        # Files read to their end (or skipped): ident -> (mtime then, last seen in a scan).
        self.finished: dict[Ident, tuple[int, float]] = {}
        self.budget = ReadBudget(READ_RATE_BYTES)
        self.ends = FileEnds(positions)
        # Files closed for room, read to the offset given: their end should they turn up rotated unchanged.
        self.closed_ends: dict[Ident, int] = {}
        self.rotations = 0
        self.truncations = 0
        self.nul_bytes_skipped = 0
        self.closed_idle = 0  # files closed to make room for others (MAX_OPEN_PER_CONTAINER)

    def at_bound(self, container: str) -> bool:
        """Whether the container has MAX_OPEN_PER_CONTAINER files open."""
        return sum(tail.container == container for tail in self.tails.values()) >= MAX_OPEN_PER_CONTAINER

    def has_room(self, container: str) -> bool:
        """Whether a file of the container can be opened now: fewer are open than the bound,
        or one of them is read to its end (close_idle makes room)."""
        return not self.at_bound(container) or any(t.container == container and t.read_all for t in self.tails.values())

    def close_idle(self, container: str) -> bool:
        """Make room: close the container's least recently written file that is read to its
        end (its position stays; a full listing reopens it when it is written again)."""
        idle = [t for t in self.tails.values() if t.container == container and t.read_all]
        if not idle:
            return False
        tail = min(idle, key=lambda t: os.fstat(t.fd).st_mtime_ns)
        self.finished[tail.ident] = (os.fstat(tail.fd).st_mtime_ns, time.monotonic())
        self.close(tail)
        self.closed_idle += 1
        return True

    def oldest_first(self) -> list[Tail]:
        """Tails by last write: a rotated file's lines go out before its successor's."""
        return sorted(self.tails.values(), key=lambda tail: os.fstat(tail.fd).st_mtime_ns)

    def drain_detached(self, root_fd: int) -> bool:
        """Read rotated-away (renamed or deleted) files to their end, then close them."""
        for tail in self.oldest_first():
            ident = tail.ident
            if mount.identity_at(root_fd, tail.parts) == ident:
                continue
            tail.final = True
            if not self.read(tail):
                return False
            if not tail.at_eof:
                continue  # its read budget ran out: finished on a later round
            if tail.pending and not self.ship(tail, tail.pending, len(tail.pending)):
                return False
            joined = tail.joiner.flush()  # its successor starts afresh
            if joined is not None and not self.put(tail, joined):
                return False
            self.rotations += 1
            self.finished[ident] = (os.fstat(tail.fd).st_mtime_ns, time.monotonic())
            self.close(tail)
        return True

    def close(self, tail: Tail) -> None:
        """Stop tailing a file, leaving its end: a rotated-away file's, for the check after a
        restart; a live one read to its end, should it turn up rotated without a write."""
        if tail.final:
            self.ends.record(tail.key, tail.put_offset if tail.read_all else os.fstat(tail.fd).st_size)
        elif tail.read_all:
            self.closed_ends[tail.ident] = tail.put_offset
        self.unwatch_file(tail.wd)
        os.close(tail.fd)
        del self.tails[tail.ident]

    def read_round(self) -> bool | None:
        """Read the files for at most POLL_S, one chunk per file in turn, so one huge file
        does not hold up the others; files of one rotation group (x.log.2, x.log.1, x.log)
        strictly oldest first; each container within its read budget. Returns whether data
        is left to read now (the round ended on time), None when the backlog closed."""
        groups: dict[tuple[str, ...], list[Tail]] = {}
        for tail in self.oldest_first():
            groups.setdefault((*tail.parts[:-1], tail.group), []).append(tail)
        deadline = time.monotonic() + POLL_S  # then drain and scan again: rotations, new files
        while groups and not self.stop_event.is_set():
            if time.monotonic() >= deadline:
                return True
            for key, tails in list(groups.items()):
                tail = tails[0]
                if not self.read(tail, max_chunks=1):
                    return None
                if tail.at_eof:
                    tails.pop(0)
                    joined = tail.joiner.flush() if tails else None  # its successor's lines come next
                    if joined is not None and not self.put(tail, joined):
                        return None
                if not tails or not tail.at_eof and not self.budget.take(tail.container, 0, peek=True):
                    del groups[key]  # done, or its container's budget is spent until the next poll
        return False

    def read(self, tail: Tail, max_chunks: int | None = None) -> bool:
        """Read what the budget allows (at most max_chunks chunks); False when the backlog closed."""
        size = os.fstat(tail.fd).st_size
        if size < tail.offset:
            log.info("logs: %s was truncated; reading it again from the start", tail.path)
            self.truncations += 1
            if tail.seen_size > tail.offset + len(tail.pending) and not self.copied(tail):
                self.lost(1, ROTATED_BEFORE_READ, at_least=True)  # lines we saw in it, unread
            tail.offset, tail.pending = 0, b""
        tail.seen_size, tail.looked_at = size, time.monotonic()
        tail.at_eof = False
        chunks = 0
        while max_chunks is None or chunks < max_chunks:
            chunks += 1
            if not self.skip_hole(tail, size):
                return False
            want = self.budget.take(tail.container, READ_CHUNK)
            if not want:
                return True
            data = os.pread(tail.fd, want, tail.offset + len(tail.pending))
            self.budget.refund(tail.container, want - len(data))
            if not data:
                tail.at_eof = True
                return True
            *lines, tail.pending = (tail.pending + data).split(b"\n")
            for line in lines:
                if not self.ship(tail, line, len(line) + 1):
                    return False
            if len(tail.pending) > MAX_LINE_BYTES:  # a line without end: ship what we have
                if not self.ship(tail, tail.pending, len(tail.pending)):
                    return False
                tail.pending = b""
        return True

    def copied(self, truncated: Tail) -> bool:
        """Whether a file of the truncated one's rotation group, opened since it was last
        looked at, holds as much as was seen of it: copytruncate's copy under a name we
        follow, read from its start (its lines come, some twice: none lost)."""
        return any(
            other is not truncated
            and other.parts[:-1] == truncated.parts[:-1]
            and other.group == truncated.group
            and other.opened_at >= truncated.looked_at
            and os.fstat(other.fd).st_size >= truncated.seen_size
            for other in self.tails.values()
        )

    def skip_hole(self, tail: Tail, size: int) -> bool:
        """Jump over a hole (a sparse file's unwritten range reads as NUL bytes) without
        reading it: counted as NUL bytes skipped; an unfinished line before it ends there."""
        at = tail.offset + len(tail.pending)
        if at >= size:
            return True
        try:
            data_at = os.lseek(tail.fd, at, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                return True  # no hole support here: the NUL bytes are read and dropped instead
            data_at = size  # nothing but a hole up to the end
        if data_at <= at:
            return True
        if tail.pending and not self.ship(tail, tail.pending, len(tail.pending)):
            return False
        self.nul_bytes_skipped += data_at - at
        tail.offset = data_at
        return True

    def ship(self, tail: Tail, line: bytes, consumed: int) -> bool:
        """One line read: to the tail's joiner, and what it completed to the backlog. NUL
        bytes are dropped (counted): a run of them is never shipped."""
        if consumed == len(line):  # the pending rest: it is no longer pending
            tail.pending = b""
        if b"\0" in line:
            kept = line.replace(b"\0", b"")
            self.nul_bytes_skipped += len(line) - len(kept)
            line = kept
            if not line.strip():
                tail.offset += consumed
                return True
        ts_ns = parse_ray_ts_ns(line) or tail.ts_ns
        offset = tail.offset + consumed
        position = {"offset": offset, "ts": ts_ns, "path": tail.path}
        for joined in tail.joiner.add(clean_line(line), ts_ns, position, time.monotonic()):
            if not self.put(tail, joined):
                return False
        tail.offset, tail.ts_ns = offset, ts_ns
        self.line_read()
        return True

    def put(self, tail: Tail, joined: Joined) -> bool:
        """An entry into the backlog; its position is the offset after its last line."""
        entry = Entry(
            tail.labels_by_level[joined.level], joined.ts_ns, joined.text, tail.metadata, tail.key, joined.last_position
        )
        tail.put_offset = joined.last_position["offset"]
        return self.backlog.put(entry)

    def send_due(self) -> bool:
        """Held entries whose wait bound passed; False when the backlog closed."""
        now = time.monotonic()
        for tail in list(self.tails.values()):
            joined = tail.joiner.due(now)
            if joined is not None and not self.put(tail, joined):
                return False
        return True

    def next_due(self) -> float | None:
        deadlines = [d for tail in self.tails.values() if (d := tail.joiner.deadline) is not None]
        return min(deadlines) if deadlines else None

    def shipped(self, container: str) -> bool:
        """Every line of the container's files read, joined and accepted by Loki."""
        for tail in self.tails.values():
            if tail.container != container:
                continue
            if not tail.at_eof or tail.pending or tail.joiner.deadline is not None:
                return False
            stored = self.positions.get(tail.key)
            if not isinstance(stored, dict) or stored.get("offset") != tail.offset:
                return False
        return True

    def release(self, parts: tuple[str, ...]) -> tuple[int, bool]:
        """Stop tailing the files below `parts` (their tree is about to be deleted) and forget
        their positions: (lines not yet accepted, whether only at least that many: past
        MAX_COUNT_BYTES they are not counted)."""
        lost, at_least, budget = 0, False, MAX_COUNT_BYTES
        for ident, tail in list(self.tails.items()):
            if tail.parts[: len(parts)] != parts:
                continue
            stored = self.positions.get(tail.key)
            start = stored.get("offset", 0) if isinstance(stored, dict) else 0
            end = os.fstat(tail.fd).st_size
            want = max(0, min(end - start, budget))
            budget -= want
            at_least |= end - start > want
            while want > 0:  # 1 MiB at a time: the count costs no memory
                chunk = os.pread(tail.fd, min(want, 1024 * 1024), start)
                if not chunk:
                    break
                lost += chunk.count(b"\n")
                start += len(chunk)
                want -= len(chunk)
            del self.tails[ident]
            self.unwatch_file(tail.wd)
            os.close(tail.fd)
            self.positions.forget(tail.key)
        return lost, at_least

    def seen(self, idents: set[Ident]) -> None:
        """The files a listing found: those finished are seen now."""
        now = time.monotonic()
        for ident in idents & self.finished.keys():
            self.finished[ident] = (self.finished[ident][0], now)

    def forget_unseen(self, after_s: float) -> None:
        """Finished files no listing found for `after_s`: forgotten, and their positions with
        them once complete."""
        now = time.monotonic()
        kept = {i: seen for i, seen in self.finished.items() if now - seen[1] < after_s}
        for ident in self.finished.keys() - kept.keys():
            self.closed_ends.pop(ident, None)
            if ident not in self.tails:
                self.ends.forget_complete(position_key(ident))
        self.finished = kept

    def close_all(self) -> None:
        for tail in list(self.tails.values()):
            self.close(tail)
