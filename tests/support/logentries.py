"""Log entries as the readers put them in the backlog, made by number for the shipper's tests."""

from __future__ import annotations

from faden_agent.workers.logs.entry import Entry


def entry(i: int, stream=(("job", "x"),), size: int = 0) -> Entry:
    return Entry(stream, 1_000 + i, f"line {i}", None, "src", i, size)
