"""One way to open the agent's private SQLite files (outbox, command journal)."""

from __future__ import annotations

import fcntl
import os
import sqlite3
from pathlib import Path
from typing import Any

from faden_agent.disk.files import quarantine, quarantine_event

SIDE_FILES = ("-wal", "-shm")
CORRUPT_CODES = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}


class CorruptDatabase(sqlite3.DatabaseError):
    pass


def open_private_sqlite(
    path: Path, schema: str, what: str = "database"
) -> tuple[sqlite3.Connection, dict[str, Any] | None]:
    """(connection, quarantine event or None)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock_fd: int | None = None
    try:
        lock_fd = fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        lock_fd = None  # cannot even make the lock file (a full disk): open unserialised
    try:
        try:
            return _open(path, schema), None
        except sqlite3.DatabaseError as exc:
            if not is_corruption(exc):
                raise
            moved = quarantine(path, SIDE_FILES)
            return _open(path, schema), quarantine_event(what, path, moved, str(exc))
    finally:
        if lock_fd is not None:
            os.close(lock_fd)  # releases the flock


def is_corruption(exc: sqlite3.DatabaseError) -> bool:
    return isinstance(exc, CorruptDatabase) or getattr(exc, "sqlite_errorcode", None) in CORRUPT_CODES


def _open(path: Path, schema: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        problems = [row[0] for row in db.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise CorruptDatabase(f"quick_check: {'; '.join(problems)[:200]}")
        db.executescript(schema)
    except BaseException:
        db.close()
        raise
    for file in (path, *(path.with_name(path.name + s) for s in SIDE_FILES)):
        if file.exists():
            file.chmod(0o600)
    return db
