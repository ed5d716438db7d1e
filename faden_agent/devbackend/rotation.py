"""Credential rotation a clone cannot win (docs/protocol.md, Credential rotation): each stream
that asks gets a fresh pending credential, the one given before withdrawn; using a withdrawn one,
or opening a stream with the replaced one, contests the node and refuses all its credentials.
The caller (store.py) holds the store's lock and passes its connection.
"""

from __future__ import annotations

import secrets
import sqlite3
import time

SCHEMA = """
CREATE TABLE IF NOT EXISTS retired_credentials (
    credential_hash TEXT PRIMARY KEY,
    node_id TEXT NOT NULL,
    kind TEXT NOT NULL  -- replaced: a confirmed rotation's old one; withdrawn: a pending one never used
);
"""
CONTESTED = (
    "shared_identity: two machines used this node's credential across a rotation (a copied disk or VM image);"
    " all its credentials are refused: enroll this machine again with a new token"
)


class Contested(Exception):
    """The node's identity is contested: str() is the one line every request of it is refused with."""

    def __init__(self) -> None:
        super().__init__(CONTESTED)


def migrate(db: sqlite3.Connection) -> None:
    db.executescript(SCHEMA)
    if "contested_at" not in {row[1] for row in db.execute("PRAGMA table_info(nodes)")}:
        db.execute("ALTER TABLE nodes ADD COLUMN contested_at REAL")


def new_credential() -> str:
    return "fdn_cred_" + secrets.token_urlsafe(32)


def retire(db: sqlite3.Connection, node_id: str, hashed: str, kind: str) -> None:
    db.execute(
        "INSERT OR REPLACE INTO retired_credentials (credential_hash, node_id, kind) VALUES (?, ?, ?)",
        (hashed, node_id, kind),
    )


def contest_if_retired(db: sqlite3.Connection, hashed: str, stream: bool) -> str | None:
    """The node a retired credential contests (a withdrawn one anywhere, a replaced one on a
    stream: the machine that rotated reconnects with its new one); None when it does not."""
    row = db.execute("SELECT node_id, kind FROM retired_credentials WHERE credential_hash = ?", (hashed,)).fetchone()
    if row is None or (row[1] == "replaced" and not stream):
        return None  # a replaced one elsewhere: a straggler (a log push) of the machine itself, refused
    return str(row[0])


def contest(db: sqlite3.Connection, node_id: str) -> None:
    db.execute(
        "UPDATE nodes SET contested_at = ?, pending_credential_hash = NULL WHERE node_id = ? AND contested_at IS NULL",
        (time.time(), node_id),
    )
