"""The on-disk command journal: a command id is written here before anything runs.
One 0600 SQLite file; a row moves queued -> running -> done, a re-delivered id is answered
with the recorded outcome instead of running twice. A done row keeps only its spec's hash
(no env value, no credential); past the retention bound it is deleted, its id kept as an
8-byte hash so that one re-delivered later is still known to have run."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from faden_agent.disk.diskfull import writes_file
from faden_agent.disk.sqlitefile import open_private_sqlite

JOURNAL_FILE = "executor.sqlite"
QUEUED, RUNNING, DONE = "queued", "running", "done"
# Values a spec may carry that must not outlive the command (peers: one-time tickets; token:
# a relay upload token); done_spec keeps none of them, these ask for a WAL flush too.
SECRET_KEYS = ("auth", "peers", "token", "env")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS commands (
    id TEXT PRIMARY KEY,
    seq INTEGER,
    kind TEXT NOT NULL,
    spec BLOB NOT NULL,
    deadline REAL,
    state TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    outcome BLOB,
    received_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS adopted (
    container_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    command_id TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS deaths (
    command_id TEXT PRIMARY KEY,
    count INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS flags (
    name TEXT PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS expired (
    id_hash INTEGER PRIMARY KEY
);
"""


class Entry:
    __slots__ = ("id", "seq", "kind", "spec", "deadline", "state", "attempt", "outcome", "received_at")

    def __init__(
        self,
        id: str,
        seq: int | None,
        kind: str,
        spec: Any,
        deadline: float | None,
        state: str,
        attempt: int,
        outcome: dict[str, Any] | None,
        received_at: float,
    ) -> None:
        self.id = id
        self.seq = seq
        self.kind = kind
        self.spec = spec
        self.deadline = deadline
        self.state = state
        self.attempt = attempt
        self.outcome = outcome
        self.received_at = received_at


def id_hash(command_id: str) -> int:
    """An expired id as SQLite stores it cheapest (a rowid): 64 bits of its SHA-256."""
    return int.from_bytes(hashlib.sha256(command_id.encode()).digest()[:8], "big", signed=True)


def done_spec(stored: bytes) -> bytes:
    """What a done command keeps of its spec (as stored): a hash, no value (env, credentials,
    tickets). Never parses it, so a damaged row cannot stop the executor here."""
    return orjson.dumps({"spec_sha256": hashlib.sha256(stored).hexdigest()})


class Journal:
    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / JOURNAL_FILE
        self._lock = threading.Lock()
        # A corrupt journal is moved aside (the executor reports it): the commands it knew
        # are forgotten, so one re-delivered now would run again; better than not running.
        self._db, self.quarantined = open_private_sqlite(self.path, _SCHEMA, "command journal")
        self._db.execute("PRAGMA secure_delete=ON")  # scrubbed credentials must not linger in free pages
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(commands)")}
        if "reported" not in columns:  # a journal from before the column: its done rows were reported
            self._db.execute("ALTER TABLE commands ADD COLUMN reported INTEGER NOT NULL DEFAULT 1")

    @writes_file  # waits out a full disk: a thread waits, the main loop gets DiskFull at once
    def add(self, command_id: str, seq: int | None, kind: str, spec: Any, deadline: float | None) -> tuple[Entry, bool]:
        """Journal a new command; returns (entry, True) when the id was already there."""
        now = time.time()
        with self._lock:
            cursor = self._db.execute(
                "INSERT OR IGNORE INTO commands (id, seq, kind, spec, deadline, state, received_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (command_id, seq, kind, orjson.dumps(spec), deadline, QUEUED, now, now),
            )
            inserted = cursor.rowcount == 1
        entry = self.get(command_id)
        assert entry is not None
        return entry, not inserted

    def _entries(self, where: str, params: tuple) -> list[Entry]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, seq, kind, spec, deadline, state, attempt, outcome, received_at FROM commands WHERE "
                + where,
                params,
            ).fetchall()
        return [_entry(r) for r in rows]

    def get(self, command_id: str) -> Entry | None:
        found = self._entries("id = ?", (command_id,))
        return found[0] if found else None

    def expired(self, command_id: str) -> bool:
        """Whether this id ran and its row was deleted after the retention bound."""
        with self._lock:
            found = self._db.execute("SELECT 1 FROM expired WHERE id_hash = ?", (id_hash(command_id),)).fetchone()
        return found is not None

    def unfinished(self) -> list[Entry]:
        """Commands a previous executor accepted but did not finish, oldest first."""
        return self._entries("state != ? ORDER BY received_at", (DONE,))

    @writes_file
    def mark_running(self, command_id: str) -> int:
        """Returns the attempt number (1 for the first run, more after a restart)."""
        with self._lock:
            self._db.execute(
                "UPDATE commands SET state = ?, attempt = attempt + 1, updated_at = ? WHERE id = ?",
                (RUNNING, time.time(), command_id),
            )
            (attempt,) = self._db.execute("SELECT attempt FROM commands WHERE id = ?", (command_id,)).fetchone()
        return attempt

    @writes_file
    def finish(self, command_id: str, outcome: dict[str, Any]) -> bool:
        """Record the terminal outcome once; False when another path already finished it."""
        with self._lock:
            row = self._db.execute("SELECT spec, state FROM commands WHERE id = ?", (command_id,)).fetchone()
            if row is None or row[1] == DONE:
                return False
            self._db.execute(
                "UPDATE commands SET state = ?, outcome = ?, spec = ?, updated_at = ?, reported = 0 WHERE id = ?",
                (DONE, orjson.dumps(outcome), done_spec(row[0]), time.time(), command_id),
            )
            if _holds_values(row[0]):  # also flush the old page out of the WAL
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return True

    @writes_file
    def expire(self, older_than_s: float) -> tuple[int, int]:
        """Delete reported done rows older than the bound; hash the spec of any done row a
        journal of an older version kept whole. Returns (deleted, hashed)."""
        with self._lock:
            past = (DONE, time.time() - older_than_s)
            ids = self._db.execute("SELECT id FROM commands WHERE state = ? AND reported = 1 AND updated_at < ?", past)
            # the hashes first: a crash before the delete leaves a row and its hash, both harmless
            self._db.executemany("INSERT OR IGNORE INTO expired VALUES (?)", [(id_hash(i),) for (i,) in ids])
            deleted = self._db.execute(
                "DELETE FROM commands WHERE state = ? AND reported = 1 AND updated_at < ?", past
            ).rowcount
            whole = self._db.execute(
                "SELECT id, spec FROM commands WHERE state = ? AND CAST(spec AS TEXT) NOT LIKE '{\"spec_sha256\":%'",
                (DONE,),
            ).fetchall()
            for command_id, spec in whole:
                self._db.execute("UPDATE commands SET spec = ? WHERE id = ?", (done_spec(spec), command_id))
            if deleted or whole:
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return deleted, len(whole)

    # --- poison detection: executor deaths while a command was running

    def mark_clean_stop(self) -> None:
        """The executor stops in order: the commands still running did not kill it."""
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO flags VALUES ('clean_stop')")

    def count_deaths(self) -> dict[str, int]:
        """At start: unless the predecessor stopped in order, one more death for each
        command it was running (in order: the count starts again). Returns command id ->
        deaths in a row so far."""
        with self._lock:
            clean = self._db.execute("DELETE FROM flags WHERE name = 'clean_stop'").rowcount == 1
            self._db.execute(
                "DELETE FROM deaths WHERE command_id NOT IN (SELECT id FROM commands WHERE state = ?)", (RUNNING,)
            )
            if clean:  # a whole life without dying: the row is broken
                self._db.execute("DELETE FROM deaths")
            else:
                self._db.execute(
                    "INSERT INTO deaths SELECT id, 1 FROM commands WHERE state = ? AND true"
                    " ON CONFLICT(command_id) DO UPDATE SET count = count + 1",
                    (RUNNING,),
                )
            return dict(self._db.execute("SELECT command_id, count FROM deaths").fetchall())

    # --- terminal records: "done" here, then in the outbox

    @writes_file
    def mark_reported(self, command_id: str) -> None:
        with self._lock:
            self._db.execute("UPDATE commands SET reported = 1 WHERE id = ?", (command_id,))

    def unreported(self) -> list[Entry]:
        """Done commands whose terminal record may not have reached the outbox."""
        return self._entries("state = ? AND reported = 0 ORDER BY updated_at", (DONE,))

    # --- containers adopted explicitly (they carry no labels of ours)

    @writes_file
    def adopt(self, container_id: str, name: str, command_id: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO adopted VALUES (?, ?, ?)", (container_id, name, command_id))

    @writes_file
    def forget(self, container_id: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM adopted WHERE container_id = ?", (container_id,))

    def adopted_ids(self) -> set[str]:
        with self._lock:
            return {r[0] for r in self._db.execute("SELECT container_id FROM adopted")}

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _holds_values(stored: bytes) -> bool:
    try:
        spec = orjson.loads(stored)
    except orjson.JSONDecodeError:
        return True  # cannot tell: flush
    return isinstance(spec, dict) and any(spec.get(key) for key in SECRET_KEYS)


def _entry(row: tuple) -> Entry:
    return Entry(
        id=row[0],
        seq=row[1],
        kind=row[2],
        spec=orjson.loads(row[3]),
        deadline=row[4],
        state=row[5],
        attempt=row[6],
        outcome=orjson.loads(row[7]) if row[7] else None,
        received_at=row[8],
    )
