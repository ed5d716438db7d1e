"""An outbox row that cannot be read back (edited with the real sqlite3 on the file: not JSON,
not an object, fields missing or of the wrong type, a flipped byte, a body that is no text) is
set aside with its bytes and reported by one event; the good records around it still come out,
the set-aside table stays bounded, and the cursor store reads a bad value as absent."""

from __future__ import annotations

import sqlite3

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faden_agent import protocol
from faden_agent.backend import outbox as outbox_module
from faden_agent.backend.outbox import Outbox
from faden_agent.workers.stream.downlink import stored_cursor


def edit(tmp_path, sql: str, *params) -> None:
    db = sqlite3.connect(tmp_path / "outbox.sqlite")
    db.execute(sql, params)
    db.commit()
    db.close()


def stored(tmp_path, record_id: str) -> bytes:
    db = sqlite3.connect(tmp_path / "outbox.sqlite")
    (body,) = db.execute("SELECT body FROM outbox WHERE id = ?", (record_id,)).fetchone()
    db.close()
    return body


def flipped(body: bytes) -> bytes:
    """One byte of the record's `"id":"` flipped: still JSON-ish, no longer the row's record."""
    at = body.index(b'"id"') + 6
    return body[:at] + bytes([body[at] ^ 0x01]) + body[at + 1 :]


CORRUPTIONS = {
    "not json": lambda body: b"{not json",
    "a list": lambda body: b"[1, 2]",
    "no data": lambda body: orjson.dumps({k: v for k, v in orjson.loads(body).items() if k != "data"}),
    "data a string": lambda body: orjson.dumps({**orjson.loads(body), "data": "x"}),
    "ts a string": lambda body: orjson.dumps({**orjson.loads(body), "ts": "now"}),
    "ts true": lambda body: orjson.dumps({**orjson.loads(body), "ts": True}),
    "kind a number": lambda body: orjson.dumps({**orjson.loads(body), "kind": 7}),
    "id null": lambda body: orjson.dumps({**orjson.loads(body), "id": None}),
    "a flipped byte": flipped,
    "an integer": lambda body: 12345,
    "invalid utf-8": lambda body: b"\xff\xfe" + body,
}


@pytest.mark.parametrize("how", sorted(CORRUPTIONS))
def test_an_unreadable_row_is_set_aside_and_reported_once(tmp_path, how):
    box = Outbox(tmp_path)
    box.put(protocol.EVENT, {"type": "before"}, record_id="a")
    box.put(protocol.EVENT, {"type": "broken"}, record_id="b")
    box.put(protocol.EVENT, {"type": "after"}, record_id="c")
    box.close()
    original = stored(tmp_path, "b")
    bad = CORRUPTIONS[how](original)
    edit(tmp_path, "UPDATE outbox SET body = ? WHERE id = 'b'", bad)
    box = Outbox(tmp_path)
    try:
        first = box.pending(100)
        assert [r["id"] for r in first] == ["a", "c"]  # never raises; the good ones come out
        again = box.pending(100)
        events = [r["data"] for r in again if r["data"]["type"] == "agent.record_set_aside"]
        assert len(events) == 1 and events[0]["table"] == "outbox" and events[0]["reason"], again
        assert box.oldest_ts() is not None
        db = sqlite3.connect(tmp_path / "outbox.sqlite")
        kept = db.execute("SELECT source, body, size FROM set_aside").fetchall()
        db.close()
        raw = bad if isinstance(bad, bytes) else str(bad).encode()
        assert kept == [("outbox", raw, len(raw))]  # the bytes are kept for a post-mortem
        box.ack([r["id"] for r in again])
        assert box.pending(100) == []  # the event is a record like any other
    finally:
        box.close()


def test_a_latest_value_row_is_set_aside_too_and_the_oldest_ts_never_raises(tmp_path):
    box = Outbox(tmp_path)
    box.put(protocol.EVENT, {"type": "first"}, record_id="a")
    box.put_latest(protocol.HEARTBEAT, {"n": 1})
    edit(tmp_path, "UPDATE latest SET body = x'00ff'")
    edit(tmp_path, "UPDATE outbox SET body = 'nope' WHERE id = 'a'")
    assert box.oldest_ts() is None  # the status thread asks: an unreadable oldest row is not an error
    assert box.pending(100) == []
    tables = sorted(r["data"]["table"] for r in box.pending(100))
    assert tables == ["latest", "outbox"]
    box.close()


def test_the_set_aside_rows_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(outbox_module, "SET_ASIDE_ROWS", 3)
    monkeypatch.setattr(outbox_module, "SET_ASIDE_BYTES", 10)
    box = Outbox(tmp_path)
    for n in range(6):
        box.put(protocol.EVENT, {"type": "x"}, record_id=f"r{n}")
    edit(tmp_path, "UPDATE outbox SET body = 'broken ' || id || ' ' || hex(randomblob(40))")
    assert box.pending(100) == []
    db = sqlite3.connect(tmp_path / "outbox.sqlite")
    kept = db.execute("SELECT seq, size, length(body) FROM set_aside ORDER BY seq").fetchall()
    db.close()
    assert [row[0] for row in kept] == [4, 5, 6] and all(size > 10 and length == 10 for _, size, length in kept)
    assert len(box.pending(100)) == 6  # each one reported
    box.close()


# No NaN: SQLite stores a NaN as NULL, which the body's NOT NULL refuses, so no row can hold one.
BODIES = st.one_of(
    st.binary(max_size=200), st.text(max_size=200), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False)
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=BODIES)
def test_any_stored_body_comes_out_as_a_record_or_is_set_aside(tmp_path_factory, body):
    path = tmp_path_factory.mktemp("box")
    box = Outbox(path)
    box.put(protocol.EVENT, {"type": "x"}, record_id="r")
    edit(path, "UPDATE outbox SET body = ? WHERE id = 'r'", body)
    records = box.pending(100)
    for record in records:
        assert isinstance(record["data"], dict) and record["id"] == "r"
    box.close()


def test_a_cursor_that_is_no_number_reads_as_zero(tmp_path):
    box = Outbox(tmp_path)
    box.set_meta("downlink_after", "12")
    edit(tmp_path, "UPDATE meta SET value = x'0102' WHERE key = 'downlink_after'")
    assert box.get_meta("downlink_after", "0") == "0"  # not text: absent
    box.close()
    assert stored_cursor("12") == 12 and stored_cursor("x1") == 0 and stored_cursor("-4") == 0
