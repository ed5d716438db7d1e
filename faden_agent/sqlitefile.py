"""One way to open the agent's private SQLite files (outbox, command journal).

WAL so several processes can write; synchronous=FULL so an acknowledged write survives a
crash; the database and its -wal/-shm side files 0600 (they may hold command specs)."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def open_private_sqlite(path: Path, schema: str) -> sqlite3.Connection:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.executescript(schema)
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if file.exists():
            file.chmod(0o600)
    return db
