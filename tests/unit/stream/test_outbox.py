"""The durable outbox: ordering, idempotent ids, latest-value records, crash safety, modes."""

from __future__ import annotations

import os
import signal

from faden_agent.backend.outbox import Outbox


def test_put_pending_ack_in_order(tmp_path):
    box = Outbox(tmp_path)
    ids = [box.put("timeline", {"n": n})["id"] for n in range(5)]
    assert [r["id"] for r in box.pending(10)] == ids
    box.ack(ids[:3])
    assert [r["data"]["n"] for r in box.pending(10)] == [3, 4]


def test_repeated_id_is_stored_once(tmp_path):
    box = Outbox(tmp_path)
    box.put("timeline", {"n": 1}, record_id="tl:c1:succeeded:0")
    box.put("timeline", {"n": 2}, record_id="tl:c1:succeeded:0")
    pending = box.pending(10)
    assert len(pending) == 1 and pending[0]["data"] == {"n": 1}


def test_latest_value_records_replace_each_other_and_come_after_durable_ones(tmp_path):
    box = Outbox(tmp_path)
    box.put_latest("inventory", {"v": 1})
    box.put("event", {"e": 1})
    latest = box.put_latest("inventory", {"v": 2})
    pending = box.pending(10)
    assert [r["kind"] for r in pending] == ["event", "inventory"]
    assert pending[1]["data"] == {"v": 2}
    box.ack([latest["id"]])
    assert box.count() == 1


def test_records_survive_a_kill_9_of_the_writer(tmp_path):
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        box = Outbox(tmp_path)
        for n in range(100):
            box.put("event", {"n": n})
        os.write(write_fd, b"done")
        signal.pause()
        os._exit(0)
    os.read(read_fd, 4)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert [r["data"]["n"] for r in Outbox(tmp_path).pending(1000)] == list(range(100))


def test_files_are_private(tmp_path):
    box = Outbox(tmp_path / "state")
    box.put("event", {"secret-ish": "spec"})
    assert (tmp_path / "state").stat().st_mode & 0o777 == 0o700
    files = list((tmp_path / "state").glob("outbox.sqlite*"))
    assert len(files) >= 2  # the database and its write-ahead log
    for file in files:
        assert file.stat().st_mode & 0o777 == 0o600, file


def test_trim_drops_oldest_beyond_the_bound(tmp_path):
    box = Outbox(tmp_path)
    for n in range(10):
        box.put("event", {"n": n})
    assert box.trim(max_records=4) == 6
    assert [r["data"]["n"] for r in box.pending(10)] == [6, 7, 8, 9]


def test_count_for_the_heartbeat_does_not_wait_behind_an_ack_waiting_for_another_process(tmp_path):
    """An ack holds the stream's connection while it waits for SQLite's write lock; a stopped
    executor holding that lock stalled every heartbeat (its count() waited up to 30 s)."""
    import sqlite3
    import threading
    import time

    box = Outbox(tmp_path)
    record = box.put("timeline", {"n": 1})
    other = sqlite3.connect(box.path, isolation_level=None)  # another process's writer, stopped mid-write
    other.execute("BEGIN IMMEDIATE")
    acking = threading.Thread(target=box.ack, args=([record["id"]],), daemon=True)
    acking.start()
    time.sleep(0.3)  # the ack now holds the connection, waiting for the write lock
    started = time.monotonic()
    assert box.count(wait_s=0.05) is None
    assert time.monotonic() - started < 5
    other.execute("ROLLBACK")
    acking.join(10)
    assert box.count(wait_s=0.05) == 0
