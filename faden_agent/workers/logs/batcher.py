"""Cuts the backlog into push batches."""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from faden_agent.protocol import MAX_LOG_PUSH_BYTES
from faden_agent.workers.logs.backlog import Backlog
from faden_agent.workers.logs.entry import Entry

MAX_BATCH_BYTES = MAX_LOG_PUSH_BYTES  # uncompressed (the size budget, protocol/); well under Loki's push limits
# How long an idle collector waits before the shipper looks at `stopping` again; the stop
# closes the backlog first (teardown), which wakes it at once, so this only paces idle wakeups.
POLL_S = 5.0
_SOURCE, _POSITION, _SIZE = attrgetter("source"), attrgetter("position"), attrgetter("size")


class Batch:
    __slots__ = ("entries", "bytes")

    def __init__(self, entries: list[Entry] | None = None, bytes: int = 0) -> None:
        self.entries: list[Entry] = [] if entries is None else entries
        self.bytes = bytes

    def positions(self) -> dict[str, Any]:
        """The newest position of every source in the batch: what acceptance lets us store."""
        return dict(zip(map(_SOURCE, self.entries), map(_POSITION, self.entries), strict=True))  # the last one wins

    def __len__(self) -> int:
        return len(self.entries)


class Batcher:
    def __init__(self, backlog: Backlog, max_lines: int, flush_interval_s: float, max_bytes: int = MAX_BATCH_BYTES):
        self.backlog = backlog
        self.max_lines = max_lines
        self.flush_interval_s = flush_interval_s
        self.max_bytes = max_bytes

    def collect(self) -> Batch | None:
        """The next batch, or None when nothing came within POLL_S (or the backlog closed)."""
        entries = self.backlog.take(self.max_lines, self.max_bytes, self.flush_interval_s, POLL_S)
        return Batch(entries, sum(map(_SIZE, entries))) if entries else None
