"""The bounded hand-off between the source readers and the shipper.

Readers block in put() while it is full: a reader that is not reading leaves its data in
the source (journal, container log, file), which is how memory stays bounded while Loki is
down. One FIFO for all sources keeps every stream's lines in the order they were read.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from operator import attrgetter

from faden_agent.workers.logs.entry import Entry

_SIZE = attrgetter("size")

# Caps on what waits in memory besides the batch in flight (see docs/logs.md, memory bound).
MAX_LINES = 10_000
MAX_BYTES = 4 * 1024 * 1024


class _Run:
    """Entries put together: how many of them are still held, and when they were put."""

    __slots__ = ("count", "put_at")

    def __init__(self, count: int, put_at: float):
        self.count = count
        self.put_at = put_at


class Backlog:
    def __init__(self, max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES):
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self._items: deque[Entry] = deque()
        # When the entries were put, one run per put, oldest first. The linger reads the oldest
        # entry's time; a (time, entry) pair per line was one more object per line to allocate,
        # to hand to the shipper's thread and to free there.
        self._runs: deque[_Run] = deque()
        self._bytes = 0
        self._cond = threading.Condition()
        self.closed = False
        self.hurried = False  # the machine goes down: every line is taken at once, no lingering
        self.blocked_puts = 0  # how many puts had to wait: the "stopped reading" counter
        # What the waiting taker needs before it wants to be woken (one wake-up per batch,
        # not per line: waking the shipper for every line costs more than the line).
        self._want_lines = 1
        self._want_bytes = max_bytes
        # Who waits, so that a put or take with nobody to wake costs no notify (a notify per
        # line was 7% of the shipper's time).
        self._takers = 0
        self._putters = 0
        self._woken = False  # a waiting taker was already woken since it last began to wait

    def put(self, entry: Entry) -> bool:
        """Add one entry, waiting while full; False once closed (the entry is not kept)."""
        return self.put_many((entry,)) == 1

    def put_many(self, entries: Sequence[Entry]) -> int:
        """Add entries in order under one lock (a reader's whole block: one lock round and
        at most one wake-up, not one per line), waiting while full; how many were kept
        (fewer only once closed)."""
        with self._cond:
            now = time.monotonic()
            kept = 0
            while kept < len(entries):
                if self._full() and not self.closed:
                    self._wait_for_room()
                    now = time.monotonic()
                if self.closed:
                    return kept
                # All that fit before the backlog turns full, in one C-speed extend; one at a
                # time where the bytes cap is near (each added while not full, as ever).
                part = entries[kept : kept + self.max_lines - len(self._items)] or entries[kept : kept + 1]
                size = sum(map(_SIZE, part))
                if len(part) > 1 and self._bytes + size >= self.max_bytes:
                    part = entries[kept : kept + 1]
                    size = part[0].size
                self._items.extend(part)
                self._runs.append(_Run(len(part), now))
                self._bytes += size
                kept += len(part)
                if (
                    self._takers
                    and not self._woken
                    and (len(self._items) >= self._want_lines or self._bytes >= self._want_bytes or self._full())
                ):
                    self._woken = True  # once: the taker is on its way (until it waits again)
                    self._cond.notify_all()
            return kept

    def _wait_for_room(self) -> None:
        self.blocked_puts += 1
        self._putters += 1
        try:
            while self._full() and not self.closed:
                self._cond.wait(1.0)
        finally:
            self._putters -= 1

    def _full(self) -> bool:
        # One entry always fits into an empty backlog, however large.
        return bool(self._items) and (len(self._items) >= self.max_lines or self._bytes >= self.max_bytes)

    def take(self, max_lines: int, max_bytes: int, linger_s: float, poll_s: float) -> list[Entry]:
        """Up to max_lines entries (about max_bytes), in order. Waits up to poll_s for a
        first entry, then until the caps are reached or linger_s has passed since that
        first entry was queued; [] when nothing came (or the backlog closed)."""
        with self._cond:
            self._takers += 1
            try:
                if not self._items:
                    self._woken = False
                    self._cond.wait_for(lambda: self._items or self.closed, poll_s)
                    if not self._items:
                        return []
                return self._take(max_lines, max_bytes, linger_s, poll_s)
            finally:
                self._takers -= 1

    def _take(self, max_lines: int, max_bytes: int, linger_s: float, poll_s: float) -> list[Entry]:
        """take() once an entry is there (the lock held): linger, then cut."""
        deadline = self._runs[0].put_at + linger_s
        self._want_lines, self._want_bytes = min(max_lines, self.max_lines), max_bytes
        try:
            while (
                len(self._items) < max_lines
                and self._bytes < max_bytes
                and not self.closed
                and not self.hurried
                and not self._full()
            ):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._woken = False
                self._cond.wait(min(left, poll_s))
        finally:
            self._want_lines, self._want_bytes = 1, self.max_bytes
        # Up to max_lines at C speed, then give back what passes max_bytes (rare: lines are small).
        popleft = self._items.popleft
        taken = [popleft() for _ in range(min(max_lines, len(self._items)))]
        size = sum(map(_SIZE, taken))
        if size > max_bytes:
            size, keep = 0, 0
            while size < max_bytes:  # the entry that reaches max_bytes is taken too, as ever
                size += taken[keep].size
                keep += 1
            self._items.extendleft(reversed(taken[keep:]))
            del taken[keep:]
        self._bytes -= size
        self._forget_runs(len(taken))
        if self._putters:
            self._cond.notify_all()  # room again for blocked readers
        return taken

    def _forget_runs(self, taken: int) -> None:
        """The runs of the `taken` oldest entries, no longer held (a few runs a batch)."""
        runs = self._runs
        while taken:
            run = runs[0]
            if run.count > taken:
                run.count -= taken
                return
            taken -= run.count
            runs.popleft()

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def hurry(self) -> None:
        """From now on a batch is cut as soon as lines are there (the machine shuts down)."""
        with self._cond:
            self.hurried = True
            self._cond.notify_all()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes(self) -> int:
        return self._bytes
