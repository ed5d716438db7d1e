"""The executor's command journal keeps no spec values once a command is done, and forgets
done commands past the retention bound: read from the journal's own SQLite files."""

from __future__ import annotations

import sqlite3
import time
import uuid

import orjson
import pytest

from tests.support.agentproc import wait_for
from tests.support.executorproc import executor_factory, prefix  # noqa: F401

pytestmark = pytest.mark.docker

DAY = 86400


def journal_bytes(ex) -> bytes:
    return b"".join(p.read_bytes() for p in ex.state_dir.glob("executor.sqlite*"))


def rows(ex) -> dict[str, tuple[str, bytes]]:
    with sqlite3.connect(ex.state_dir / "executor.sqlite") as db:
        return {r[0]: (r[1], r[2]) for r in db.execute("SELECT id, state, spec FROM commands")}


def put_done_row(ex, command_id: str, age_s: float, spec: dict) -> None:
    """A done, reported row as an older executor left it: the whole spec kept."""
    at = time.time() - age_s
    outcome = {"command_id": command_id, "state": "succeeded", "reason": "ok", "message": "old"}
    with sqlite3.connect(ex.state_dir / "executor.sqlite") as db:
        db.execute(
            "INSERT INTO commands (id, seq, kind, spec, state, outcome, received_at, updated_at, reported)"
            " VALUES (?, 1, 'container.run', ?, 'done', ?, ?, ?, 1)",
            (command_id, orjson.dumps(spec), orjson.dumps(outcome), at, at),
        )


def test_done_commands_keep_no_env_and_expire_after_the_bound(executor_factory, prefix):
    secret = f"hf_{uuid.uuid4().hex}"
    spec = {"name": f"{prefix}-c", "image": "faden-test/absent:1", "pull": "never", "env": {"HF_TOKEN": secret}}
    agent, ex = executor_factory()
    done = ex.run(f"{prefix}-run", "container.run", spec)
    assert (done["state"], done["reason"]) == ("failed", "image_not_found"), done
    state, kept = rows(ex)[f"{prefix}-run"]
    assert state == "done" and set(orjson.loads(kept)) == {"spec_sha256"}
    assert secret.encode() not in journal_bytes(ex)
    agent.stop()

    old_secret, young_secret = f"hf_{uuid.uuid4().hex}", f"hf_{uuid.uuid4().hex}"
    put_done_row(ex, f"{prefix}-31d", 31 * DAY, {**spec, "env": {"HF_TOKEN": old_secret}})
    put_done_row(ex, f"{prefix}-29d", 29 * DAY, {**spec, "env": {"HF_TOKEN": young_secret}})
    agent, ex = executor_factory()
    wait_for(lambda: f"{prefix}-31d" not in rows(ex), 30, what="the 31-day-old done command deleted")
    left = rows(ex)
    assert f"{prefix}-29d" in left and f"{prefix}-run" in left
    assert all(set(orjson.loads(spec_bytes)) == {"spec_sha256"} for state, spec_bytes in left.values())
    raw = journal_bytes(ex)
    for value in (secret, old_secret, young_secret):
        assert value.encode() not in raw, value

    # a re-delivery is answered from the recorded outcome, not run again
    ack = ex.send(f"{prefix}-run", "container.run", spec)
    assert ack["duplicate"] is True
    replayed = [r for r in ex.timeline(f"{prefix}-run") if r["data"]["state"] == "failed"]
    assert {r["id"] for r in replayed} == {f"tl:{prefix}-run:failed:0"}


def test_a_shorter_retention_is_a_variable(executor_factory, prefix):
    agent, ex = executor_factory()
    agent.stop()
    put_done_row(ex, f"{prefix}-2d", 2 * DAY, {"name": "x"})
    agent, ex = executor_factory(command_retention_days=1)
    wait_for(lambda: f"{prefix}-2d" not in rows(ex), 30, what="the 2-day-old done command deleted at a 1-day bound")


def test_an_id_redelivered_after_its_row_expired_is_not_run_again(executor_factory, prefix):
    agent, ex = executor_factory()
    agent.stop()
    # ran 40 days ago: its row goes at start, its id stays known (a restored backend sends it again)
    spec = {"name": f"{prefix}-c", "image": "faden-test/absent:1", "pull": "never"}
    put_done_row(ex, f"{prefix}-40d", 40 * DAY, spec)
    agent, ex = executor_factory()
    wait_for(lambda: f"{prefix}-40d" not in rows(ex), 30, what="the 40-day-old done command deleted")
    with sqlite3.connect(ex.state_dir / "executor.sqlite") as db:
        assert db.execute("SELECT count(*) FROM expired").fetchone() == (1,)
    ended = ex.run(f"{prefix}-40d", "container.run", spec)  # run, it would fail image_not_found
    assert (ended["state"], ended["reason"]) == ("rejected", "already_ran"), ended
    assert "ran more than 30 days ago" in ended["message"]
    assert ex.states(f"{prefix}-40d") == ["received", "rejected"]  # never started
    # a new id still runs
    fresh = ex.run(f"{prefix}-new", "container.run", spec)
    assert (fresh["state"], fresh["reason"]) == ("failed", "image_not_found"), fresh
