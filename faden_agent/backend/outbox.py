"""The outbox: the durable queue of reports; records that must reach the backend survive any crash.
Producers put records into one SQLite file (WAL); the stream worker's Uplink sends and acks
them. A record is on disk before put returns; every id is unique so a resend dedups; a row that
cannot be read back is set aside (bytes kept, bounded) with an event, never returned. Its meta
table is the cursor store (CURSOR_KEYS)."""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from faden_agent import protocol
from faden_agent.disk.diskfull import writes_file
from faden_agent.disk.files import quarantine_record_id
from faden_agent.disk.sqlitefile import open_private_sqlite

log = logging.getLogger(__name__)

OUTBOX_FILE = "outbox.sqlite"
# A bound so a backend gone for weeks cannot fill the disk: the oldest records beyond it
# are dropped and counted (reported as an event once the backend is back).
MAX_RECORDS = 500_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    kind TEXT NOT NULL,
    body BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS latest (
    kind TEXT PRIMARY KEY,
    id TEXT NOT NULL,
    body BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS set_aside (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    source TEXT NOT NULL,
    reason TEXT NOT NULL,
    size INTEGER NOT NULL,
    body BLOB NOT NULL
);
"""
# Rows that could not be read back, kept for a post-mortem: the newest SET_ASIDE_ROWS, each's
# first SET_ASIDE_BYTES (its full size is kept beside).
SET_ASIDE_ROWS = 100
SET_ASIDE_BYTES = 64 << 10
# The meta table is the agent's cursor store: how far each reader got, kept in the file that
# holds the records it produced (get_meta / set_meta). Every key, with its owner:
CURSOR_KEYS = {
    "downlink_after": "stream (downlink.py): the last downlink sequence acknowledged",
    "downlink_epoch": "stream (downlink.py): the backend identity that sequence belongs to",
    "executor.events_since": "executor (events.py): the Docker event time the replay starts at",
    "executor.containers_seen": "executor (reconcile.py): each managed container's last snapshot",
}


def new_record_id() -> str:
    return uuid.uuid4().hex


def make_record(kind: str, data: dict[str, Any], record_id: str | None = None) -> dict[str, Any]:
    """One uplink record as it travels: {"id", "kind", "ts", "data"}."""
    return {"id": record_id or new_record_id(), "kind": kind, "ts": time.time(), "data": data}


def read_record(body: object, row_id: object, row_kind: object) -> dict[str, Any] | str:
    """The record a stored row holds, or why it is unreadable (one line): a JSON object with
    `id` and `kind` equal to the row's own (an ack deletes by id), a finite `ts`, a `data` object."""
    if not isinstance(body, (bytes, str)):
        return f"the body is {type(body).__name__}, not text"
    try:
        record = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return f"not JSON ({str(exc)[:120]})"
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not an object"
    if not isinstance(record.get("id"), str) or record["id"] != row_id:
        return "its id is missing or differs from the row's"
    if not isinstance(record.get("kind"), str) or record["kind"] != row_kind:
        return "its kind is missing or differs from the row's"
    ts = record.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
        return "its ts is not a finite number"
    if not isinstance(record.get("data"), dict):
        return "its data is not an object"
    return record


class Outbox:
    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / OUTBOX_FILE
        self._lock = threading.Lock()
        self._db, quarantined = open_private_sqlite(self.path, _SCHEMA, "outbox")
        if quarantined:
            self.put(protocol.EVENT, quarantined, record_id=quarantine_record_id(quarantined))

    @writes_file
    def _write(self, sql: str, params: tuple | list = ()) -> Any:
        """One write statement (its own transaction), waiting out a full disk."""
        with self._lock:
            return self._db.execute(sql, params)

    def put(self, kind: str, data: dict[str, Any], record_id: str | None = None) -> dict[str, Any]:
        """Store a record durably; a repeated id is a no-op. Returns the record."""
        record = make_record(kind, data, record_id)
        self._write(
            "INSERT OR IGNORE INTO outbox (id, kind, body) VALUES (?, ?, ?)", (record["id"], kind, orjson.dumps(record))
        )
        return record

    def put_latest(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        """Replace the pending latest-value record of this kind."""
        record = make_record(kind, data)
        self._write(
            "INSERT OR REPLACE INTO latest (kind, id, body) VALUES (?, ?, ?)",
            (kind, record["id"], orjson.dumps(record)),
        )
        return record

    def pending(self, limit: int) -> list[dict[str, Any]]:
        """Oldest durable records first, then the latest-value ones; an unreadable row is set
        aside and reported by an event, which a later call returns."""
        with self._lock:
            found = self._db.execute(
                "SELECT 'outbox', rowid, id, kind, body FROM outbox ORDER BY seq LIMIT ?", (limit,)
            ).fetchall()
            if len(found) < limit:
                found += self._db.execute(
                    "SELECT 'latest', rowid, id, kind, body FROM latest LIMIT ?", (limit - len(found),)
                ).fetchall()
        records = []
        for table, rowid, row_id, kind, body in found:
            record = read_record(body, row_id, kind)
            if isinstance(record, str):
                self.set_aside(table, rowid, body, record)
            else:
                records.append(record)
        return records

    def set_aside(self, table: str, rowid: int, body: object, reason: str) -> None:
        """Move one unreadable row of `table` into set_aside (the newest SET_ASIDE_ROWS are
        kept) and put the event that reports it."""
        raw = body if isinstance(body, bytes) else str(body).encode("utf-8", "replace")
        kept = self._move_aside(table, rowid, raw, reason)
        log.error("outbox: a stored %s row could not be read (%s); kept as set_aside row %d", table, reason, kept)
        self.put(
            protocol.EVENT,
            {
                "type": "agent.record_set_aside",
                "table": table,
                "set_aside_row": kept,
                "reason": reason,
                "bytes": len(raw),
                "message": f"an outbox {table} row of {len(raw)} bytes could not be read ({reason}); set aside",
            },
            record_id=f"ev:set-aside:{hashlib.sha256(raw).hexdigest()[:32]}",
        )

    @writes_file
    def _move_aside(self, table: str, rowid: int, raw: bytes, reason: str) -> int:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT INTO set_aside (at, source, reason, size, body) VALUES (?, ?, ?, ?, ?)",
                    (time.time(), table, reason, len(raw), raw[:SET_ASIDE_BYTES]),
                )
                (kept,) = self._db.execute("SELECT last_insert_rowid()").fetchone()
                self._db.execute("DELETE FROM set_aside WHERE seq <= ?", (kept - SET_ASIDE_ROWS,))
                table = "outbox" if table == "outbox" else "latest"
                self._db.execute(f"DELETE FROM {table} WHERE rowid = ?", (rowid,))  # noqa: S608 - one of two names
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        return int(kept)

    def ack(self, ids: Iterable[str]) -> None:
        self._delete([(i,) for i in ids])  # a list: a retried write must see the same ids

    @writes_file
    def _delete(self, rows: list[tuple[str]]) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("DELETE FROM outbox WHERE id = ?", rows)
                self._db.executemany("DELETE FROM latest WHERE id = ?", rows)
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:  # SQLite may have rolled back already (disk full)
                    self._db.execute("ROLLBACK")
                raise

    def count(self, wait_s: float = -1) -> int | None:
        """Records waiting; None when this connection stays busy past wait_s (the default
        waits). The heartbeat must not wait: an ack can hold the connection while it waits
        for SQLite's write lock, which a stopped process of the agent may hold."""
        if not self._lock.acquire(timeout=wait_s):
            return None
        try:  # WAL: reading never waits for another process's writer
            (durable,) = self._db.execute("SELECT COUNT(*) FROM outbox").fetchone()
            (latest,) = self._db.execute("SELECT COUNT(*) FROM latest").fetchone()
        finally:
            self._lock.release()
        return durable + latest

    def oldest_ts(self, wait_s: float = 0) -> float | None:
        """When the oldest waiting durable record was made; None: none (or busy past wait_s)."""
        if not self._lock.acquire(timeout=wait_s):
            return None
        try:
            row = self._db.execute("SELECT body, id, kind FROM outbox ORDER BY seq LIMIT 1").fetchone()
        finally:
            self._lock.release()
        record = read_record(*row) if row else None
        return record["ts"] if isinstance(record, dict) else None  # an unreadable one: pending() sets it aside

    def trim(self, max_records: int = MAX_RECORDS) -> int:
        """Drop the oldest durable records beyond the bound; returns how many were dropped."""
        with self._lock:
            (count,) = self._db.execute("SELECT COUNT(*) FROM outbox").fetchone()
        excess = count - max_records
        if excess <= 0:
            return 0
        self._write("DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox ORDER BY seq LIMIT ?)", (excess,))
        return excess

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        """A cursor (CURSOR_KEYS names each); a value that is not text reads as absent."""
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row and isinstance(row[0], str) else default

    def set_meta(self, key: str, value: str) -> None:
        self._write("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def close(self) -> None:
        with self._lock:
            self._db.close()
