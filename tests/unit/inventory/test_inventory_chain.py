"""The inventory chain across a restart (record.HeldFile): after a restart the record goes on
from what the receiver holds, as a changes record, once this run heard the backend's hello; a
kept file that does not hash as it says is not used (a full record follows)."""

from __future__ import annotations

import orjson

from faden_agent.node import backend_accepts
from faden_agent.protocol.inventory import CHANGES, FULL, receive
from faden_agent.workers.inventory.record import HELD_FILE, HeldFile, RecordEmitter

SECTIONS = {"host": {"hostname": "gpu-07", "usage": {"load_avg": [0.1, 0.1, 0.1]}}, "labels": {"rack": "a"}}


def emitter(tmp_path) -> RecordEmitter:
    made = RecordEmitter(usage_refresh_s=300, kept=HeldFile(tmp_path))
    made.changes = True
    return made


def test_a_label_changed_across_a_restart_is_one_small_changes_record(tmp_path):
    first = emitter(tmp_path)
    full = first.build(SECTIONS, now=1000.0)
    assert full["type"] == FULL
    first.sent(full)
    held = receive(None, full).held

    again = emitter(tmp_path)  # the worker restarted with FADEN_NODE_AGENT_LABELS changed
    relabelled = {**SECTIONS, "labels": {"rack": "b"}}
    again.heard = False
    assert again.waiting() and again.build(relabelled, now=1060.0) is None  # no hello yet: wait
    again.heard = True
    record = again.build(relabelled, now=1061.0)
    assert record["type"] == CHANGES and record["base"] == full["hash"]
    assert record["set"] == [[["labels", "rack"], "b"]] and "unset" not in record and "splice" not in record
    again.sent(record)
    assert receive(held, record).held["labels"] == {"rack": "b"}  # the receiver applies it
    assert not again.waiting()


def test_a_kept_file_that_does_not_verify_means_a_full_record(tmp_path):
    first = emitter(tmp_path)
    first.sent(first.build(SECTIONS, now=1000.0))
    kept = orjson.loads((tmp_path / HELD_FILE).read_bytes())
    kept["held"]["labels"] = {"rack": "forged"}
    (tmp_path / HELD_FILE).write_bytes(orjson.dumps(kept))
    assert HeldFile(tmp_path).load() is None
    (tmp_path / HELD_FILE).write_bytes(b"\x00garbage")
    again = emitter(tmp_path)
    assert not again.waiting() and again.build(SECTIONS, now=1060.0)["type"] == FULL


def test_the_stream_workers_start_forgets_the_hello_until_the_next(tmp_path):
    backend_accepts.heard_hello(tmp_path, ["inventory.changes"])
    assert backend_accepts.read(tmp_path).heard
    backend_accepts.forget(tmp_path)
    assert not backend_accepts.read(tmp_path).heard and backend_accepts.read(tmp_path).accepts == frozenset()
    backend_accepts.full_requested(tmp_path, now=5.0)
    assert not backend_accepts.read(tmp_path).heard  # an inventory.full is no hello
    backend_accepts.heard_hello(tmp_path, [])  # a backend of the previous version: heard, nothing accepted
    assert backend_accepts.read(tmp_path).heard
    (tmp_path / backend_accepts.FILE_NAME).write_text('{"accepts": [], "full_requested_at": 0}')
    assert backend_accepts.read(tmp_path).heard  # a file of the previous release: as before
