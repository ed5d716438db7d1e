"""The command journal on a real SQLite file: exactly-once bookkeeping across reopen."""

from __future__ import annotations

import stat

from faden_agent.workers.executor.journal import DONE, QUEUED, RUNNING, Journal


def test_add_is_idempotent_and_survives_reopen(tmp_path):
    journal = Journal(tmp_path)
    entry, duplicate = journal.add("c1", 1, "image.pull", {"image": "x", "auth": {"password": "s3cret"}}, None)
    assert not duplicate and entry.state == QUEUED
    again, duplicate = journal.add("c1", 2, "container.run", {}, None)
    assert duplicate and again.kind == "image.pull" and again.seq == 1
    assert journal.mark_running("c1") == 1
    journal.close()

    reopened = Journal(tmp_path)
    (unfinished,) = reopened.unfinished()
    assert unfinished.id == "c1" and unfinished.state == RUNNING and unfinished.attempt == 1
    assert reopened.mark_running("c1") == 2
    outcome = {"command_id": "c1", "state": "succeeded", "reason": "ok", "message": "done"}
    assert reopened.finish("c1", outcome) is True
    assert reopened.finish("c1", {**outcome, "state": "failed"}) is False  # one outcome only
    done = reopened.get("c1")
    assert done.state == DONE and done.outcome == outcome
    assert set(done.spec) == {"spec_sha256"}  # credentials leave the journal once done
    assert reopened.unfinished() == []
    for path in tmp_path.glob("executor.sqlite*"):  # the database and its WAL
        assert b"s3cret" not in path.read_bytes(), path
    assert stat.S_IMODE((tmp_path / "executor.sqlite").stat().st_mode) == 0o600


def test_adopted_containers_are_remembered(tmp_path):
    journal = Journal(tmp_path)
    journal.adopt("abc", "legacy", "c9")
    assert Journal(tmp_path).adopted_ids() == {"abc"}
    journal.forget("abc")
    assert journal.adopted_ids() == set()


def test_deaths_are_counted_per_running_command_and_an_orderly_stop_breaks_the_row(tmp_path):
    journal = Journal(tmp_path)
    journal.add("runs", 1, "container.run", {}, None)
    journal.mark_running("runs")
    journal.add("waits", 2, "container.run", {}, None)  # queued: it did not kill anybody
    assert journal.count_deaths() == {"runs": 1}
    assert journal.count_deaths() == {"runs": 2}
    journal.mark_clean_stop()
    assert journal.count_deaths() == {}
    assert journal.count_deaths() == {"runs": 1}
    journal.finish("runs", {"state": "failed"})
    assert journal.count_deaths() == {}


def test_expire_deletes_old_done_rows_and_hashes_whole_ones_even_damaged(tmp_path):
    import sqlite3
    import time

    journal = Journal(tmp_path)
    journal.add("young", 1, "container.run", {"env": {"T": "young-secret"}}, None)
    journal.finish("young", {"state": "failed"})
    journal.mark_reported("young")
    with sqlite3.connect(tmp_path / "executor.sqlite") as db:
        for command_id, age_s, spec in (("old", 40 * 86400, b'{"env": 1}'), ("damaged", 60, b"\xff{env: old-secret")):
            at = time.time() - age_s
            db.execute(
                "INSERT INTO commands (id, kind, spec, state, outcome, received_at, updated_at, reported)"
                " VALUES (?, 'container.run', ?, 'done', '{}', ?, ?, 1)",
                (command_id, spec, at, at),
            )
    assert journal.expire(30 * 86400) == (1, 1)
    assert journal.get("old") is None and set(journal.get("damaged").spec) == {"spec_sha256"}
    assert set(journal.get("young").spec) == {"spec_sha256"}
    for path in tmp_path.glob("executor.sqlite*"):
        assert b"secret" not in path.read_bytes(), path
    assert journal.expire(30 * 86400) == (0, 0)
