"""Corrupt files are moved aside, recreated and reported: outbox, command
journal, log positions."""

from __future__ import annotations

import multiprocessing

import orjson

from faden_agent import protocol
from faden_agent.backend.outbox import OUTBOX_FILE, Outbox
from faden_agent.workers.executor.journal import JOURNAL_FILE, Journal
from faden_agent.workers.logs.positions import POSITIONS_FILE, Positions

GARBAGE = b"this is not a database \x00\xff" * 200


def corrupt_copies(state_dir, name):
    return sorted(p.name for p in state_dir.iterdir() if p.name.startswith(f"{name}.corrupt-"))


def test_a_corrupt_outbox_is_moved_aside_and_the_new_one_starts_with_the_event(tmp_path):
    (tmp_path / OUTBOX_FILE).write_bytes(GARBAGE)
    outbox = Outbox(tmp_path)
    [moved] = corrupt_copies(tmp_path, OUTBOX_FILE)
    assert (tmp_path / moved).read_bytes() == GARBAGE  # kept for a post-mortem, untouched
    [event] = outbox.pending(10)
    assert event["kind"] == protocol.EVENT and event["data"]["type"] == "agent.file_quarantined"
    assert event["data"]["file"] == "outbox" and event["data"]["moved_to"].endswith(moved)
    outbox.put(protocol.EVENT, {"type": "x"})
    assert outbox.count() == 2
    assert corrupt_copies(tmp_path, OUTBOX_FILE) == [moved]
    Outbox(tmp_path)  # a healthy file is left alone
    assert corrupt_copies(tmp_path, OUTBOX_FILE) == [moved]


def test_a_damaged_page_is_found_by_quick_check(tmp_path):
    outbox = Outbox(tmp_path)
    for n in range(2000):
        outbox.put(protocol.EVENT, {"type": "x", "n": n, "pad": "y" * 200})
    outbox._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    outbox.close()
    path = tmp_path / OUTBOX_FILE
    data = bytearray(path.read_bytes())
    data[4096 * 3 : 4096 * 3 + 512] = b"\xee" * 512  # a b-tree page, not the header
    path.write_bytes(bytes(data))
    again = Outbox(tmp_path)
    assert len(corrupt_copies(tmp_path, OUTBOX_FILE)) == 1
    assert [r["data"]["type"] for r in again.pending(10)] == ["agent.file_quarantined"]


def _open_outbox(state_dir: str) -> None:
    Outbox(state_dir)


def test_processes_opening_a_corrupt_outbox_at_once_move_it_once(tmp_path):
    (tmp_path / OUTBOX_FILE).write_bytes(GARBAGE)
    context = multiprocessing.get_context("fork")
    procs = [context.Process(target=_open_outbox, args=(str(tmp_path),)) for _ in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(30)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert len(corrupt_copies(tmp_path, OUTBOX_FILE)) == 1
    assert Outbox(tmp_path).count() == 1


def test_a_corrupt_journal_is_moved_aside_and_handed_to_the_executor_to_report(tmp_path):
    (tmp_path / JOURNAL_FILE).write_bytes(GARBAGE)
    journal = Journal(tmp_path)
    assert journal.quarantined["file"] == "command journal"
    assert len(corrupt_copies(tmp_path, JOURNAL_FILE)) == 1
    entry, duplicate = journal.add("c1", 1, "container.stop", {"name": "x"}, None)
    assert not duplicate and entry.state == "queued"


def test_corrupt_positions_are_moved_aside_and_reported(tmp_path):
    (tmp_path / POSITIONS_FILE).write_bytes(b'{"journal": "abc", ')
    positions = Positions(tmp_path)
    assert positions.quarantined["file"] == "log positions" and positions.get("journal") is None
    assert len(corrupt_copies(tmp_path, POSITIONS_FILE)) == 1
    positions.advance({"journal": "c2"})
    positions.save(force=True)
    assert orjson.loads((tmp_path / POSITIONS_FILE).read_bytes()) == {"journal": "c2"}
