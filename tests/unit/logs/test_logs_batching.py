"""Batching and the bounded backlog: batches capped by lines and bytes, a partial batch waits at
most the flush interval, a full backlog blocks its readers until drained."""

from __future__ import annotations

import threading
import time

from faden_agent.workers.logs.backlog import Backlog
from faden_agent.workers.logs.batcher import Batcher
from tests.support.logentries import entry


def test_batches_are_capped_by_lines_and_bytes_and_a_backlog_drains_at_once():
    backlog = Backlog()
    for i in range(25):
        backlog.put(entry(i))
    batcher = Batcher(backlog, max_lines=10, flush_interval_s=30)
    started = time.monotonic()
    sizes = [len(batcher.collect()) for _ in range(2)]
    assert sizes == [10, 10] and time.monotonic() - started < 5  # full batches never wait
    by_bytes = Batcher(backlog, max_lines=100, flush_interval_s=0.2, max_bytes=1000)
    for i in range(5):
        backlog.put(entry(100 + i, size=400))
    first = by_bytes.collect()
    # 5 small (71 bytes each) + 2 of 400 reach the 1000-byte cap; order is kept.
    assert [e.line for e in first.entries] == [f"line {i}" for i in (20, 21, 22, 23, 24, 100, 101)]
    assert [e.line for e in by_bytes.collect().entries] == ["line 102", "line 103", "line 104"]


def test_a_partial_batch_waits_at_most_the_flush_interval():
    backlog = Backlog()
    backlog.put(entry(1))
    started = time.monotonic()
    batch = Batcher(backlog, max_lines=100, flush_interval_s=0.3).collect()
    assert len(batch) == 1 and 0.25 <= time.monotonic() - started < 3


def test_the_backlog_blocks_readers_when_full_and_releases_them_when_drained():
    backlog = Backlog(max_lines=3)
    for i in range(3):
        backlog.put(entry(i))
    done = threading.Event()
    threading.Thread(target=lambda: (backlog.put(entry(9)), done.set()), daemon=True).start()
    assert not done.wait(0.3) and len(backlog) == 3  # the reader waits: memory stays bounded
    assert len(backlog.take(1, 10**6, 0, 0)) == 1
    assert done.wait(5) and backlog.blocked_puts == 1
    backlog.close()
    assert backlog.put(entry(10)) is False
