"""The push policy against a real HTTP receiver that answers like Loki: 400 is final and
never resent, 413 splits, 429/5xx/connection errors are retried (Retry-After honoured),
a Loki that refuses structured metadata gets the lines without it."""

from __future__ import annotations

import threading
import time

import pytest

from faden_agent.config import load_config
from faden_agent.workers.logs.entry import Entry
from faden_agent.workers.logs.loki import Pusher
from faden_agent.workers.logs.targets import DirectLoki
from tests.lokireceiver import LokiReceiver

STREAM = (("job", "node-agent"), ("level", "info"))


def entries(n: int, ts0: int | None = None, metadata: dict | None = None, width: int = 10) -> list[Entry]:
    ts0 = ts0 or time.time_ns()
    return [Entry(STREAM, ts0 + i, f"{i:0{width}d}", metadata, "journal", i) for i in range(n)]


@pytest.fixture
def receiver():
    with LokiReceiver() as loki:
        yield loki


def pusher_for(loki: LokiReceiver, tmp_path, backoff=(0.05, 0.2)) -> Pusher:
    config = load_config({}, loki_url=loki.url, state_path=tmp_path / "state.json")
    stop = threading.Event()
    return Pusher(DirectLoki(config.loki_url, config), backoff[0], backoff[1], stop.wait)


def test_accepted_push_carries_lines_labels_and_ns_timestamps(receiver, tmp_path):
    batch = entries(3, metadata={"unit": "a.service"})
    outcome = pusher_for(receiver, tmp_path).push(batch)
    assert outcome.accepted == 3
    got = receiver.entries()
    assert [(a.ts, a.line, a.metadata) for a in got] == [(str(e.ts_ns), e.line, {"unit": "a.service"}) for e in batch]
    assert got[0].labels == dict(STREAM)
    assert receiver.statuses == {204: 1}


def test_a_400_batch_is_final_and_never_resent(tmp_path):
    with LokiReceiver(reject_older_than_s=3600) as loki:
        batch = entries(4) + entries(1, ts0=time.time_ns() - 2 * 3600 * 10**9)  # one too old
        outcome = pusher_for(loki, tmp_path).push(batch)
        assert (outcome.accepted, outcome.rejected) == (0, 5)
        assert loki.pushes == 1 and loki.statuses == {400: 1}
        assert len(loki.entries()) == 4  # like Loki: the valid lines were stored


def test_a_413_batch_is_split_in_order_and_a_single_huge_line_is_dropped(tmp_path):
    with LokiReceiver(max_body_bytes=2000) as loki:
        batch = entries(60, width=40)  # ~4 KB of JSON
        outcome = pusher_for(loki, tmp_path).push(batch)
        assert outcome.accepted == 60 and loki.statuses[413] >= 1
        assert [a.line for a in loki.entries()] == [e.line for e in batch]
        huge = pusher_for(loki, tmp_path).push(entries(1, width=5000))
        assert huge.dropped == 1 and huge.accepted == 0


def test_429_is_retried_after_exactly_retry_after(receiver, tmp_path):
    receiver.set_mode("throttle", retry_after=0.5)
    threading.Timer(1.2, receiver.set_mode, ("ok",)).start()
    started = time.monotonic()
    # A backoff of 5 s would make this take >= 2.5 s: Retry-After must win.
    outcome = pusher_for(receiver, tmp_path, backoff=(5.0, 10.0)).push(entries(10))
    took = time.monotonic() - started
    assert outcome.accepted == 10 and 1.2 <= took < 2.4
    assert receiver.statuses[429] >= 2 and len(receiver.entries()) == 10


def test_connection_errors_and_5xx_are_retried_until_loki_is_back(receiver, tmp_path):
    receiver.down()
    threading.Timer(0.8, lambda: (receiver.up(), receiver.set_mode("error", status=503))).start()
    threading.Timer(1.6, receiver.set_mode, ("ok",)).start()
    pusher = pusher_for(receiver, tmp_path)
    assert pusher.push(entries(7)).accepted == 7
    assert receiver.statuses.get(503, 0) >= 1 and pusher.retries >= 3
    assert len(receiver.entries()) == 7


def test_stopping_abandons_a_push_without_reporting_it_done(receiver, tmp_path):
    receiver.set_mode("error", status=500)
    config = load_config({}, loki_url=receiver.url, state_path=tmp_path / "state.json")
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    assert Pusher(DirectLoki(receiver.url, config), 0.05, 0.1, stop.wait).push(entries(2)) is None


def test_a_loki_without_structured_metadata_gets_the_lines_without_it(tmp_path):
    with LokiReceiver(allow_structured_metadata=False) as loki:
        pusher = pusher_for(loki, tmp_path)
        assert pusher.push(entries(3, metadata={"unit": "x"})).accepted == 3
        assert [a.metadata for a in loki.entries()] == [None] * 3 and pusher.with_metadata is False
