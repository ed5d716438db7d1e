"""The reference backend's persistence: one SQLite file under --data.

Secrets are stored hashed (sha256): the file never holds a usable token or credential.
Every method takes the one lock, so the threaded HTTP server can share one connection.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

from faden_agent import protocol
from faden_agent.devbackend import clusters, host_requests, rotation
from faden_agent.protocol.inventory import receive  # the receiver's rule (docs/inventory.md)

ENROLL_RETRY_WINDOW_S = 3600  # how long a spent token can be re-presented by the same attempt

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
    token_hash TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    used_at REAL,
    node_id TEXT,
    attempt_hash TEXT
);
CREATE TABLE IF NOT EXISTS nodes (
    node_id TEXT PRIMARY KEY,
    credential_hash TEXT UNIQUE NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0,
    enrolled_at REAL NOT NULL,
    facts BLOB NOT NULL,
    last_seen_at REAL,
    last_heartbeat_at REAL,
    heartbeats INTEGER NOT NULL DEFAULT 0,
    heartbeat BLOB,
    inventory BLOB,
    inventory_at REAL
);
CREATE TABLE IF NOT EXISTS commands (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    node_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    spec BLOB NOT NULL,
    deadline REAL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS records (
    node_id TEXT NOT NULL,
    id TEXT NOT NULL,
    kind TEXT NOT NULL,
    ts REAL,
    received_at REAL NOT NULL,
    command_id TEXT,
    data BLOB NOT NULL,
    PRIMARY KEY (node_id, id)
);
CREATE INDEX IF NOT EXISTS records_by_command ON records (command_id, received_at);
CREATE INDEX IF NOT EXISTS records_by_kind ON records (node_id, kind, received_at);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS fingerprints (
    node_id TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    PRIMARY KEY (node_id, fingerprint)
);
CREATE TABLE IF NOT EXISTS log_lines (
    n INTEGER PRIMARY KEY AUTOINCREMENT,
    node_id TEXT NOT NULL,
    labels BLOB NOT NULL,
    ts_ns TEXT NOT NULL,
    line TEXT NOT NULL,
    metadata BLOB
);
"""


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _json(blob: bytes | None) -> Any:
    return orjson.loads(blob) if blob is not None else None


class TokenRefused(Exception):
    pass


# Beside the database: a restore of the database alone leaves it, one of the whole data
# directory rolls it back too (then the agents see `high_seq` below their cursor).
HIGH_WATER_FILE = "command-high-water"
# Two fingerprints heard for one node within this window: two machines speak as one (a
# cloned disk or VM image); a machine whose hardware changed once shows it for as long.
SHARED_IDENTITY_WINDOW_S = 900.0


class Store:
    def __init__(self, data_dir: Path):
        data_dir = Path(data_dir)
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path = data_dir / "backend.sqlite"
        self._high_water_path = data_dir / HIGH_WATER_FILE
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA + clusters.SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(tokens)")}
        if "attempt_hash" not in columns:  # a data directory from before enrollment retries
            self._db.execute("ALTER TABLE tokens ADD COLUMN attempt_hash TEXT")
        if "pending_credential_hash" not in {row[1] for row in self._db.execute("PRAGMA table_info(nodes)")}:
            self._db.execute("ALTER TABLE nodes ADD COLUMN pending_credential_hash TEXT")
        rotation.migrate(self._db)
        # node id -> the credential a rotation is delivering: memory only (the file keeps hashes);
        # lost with the process, the old credential stays valid and a rotation is asked again.
        self.pending_credentials: dict[str, str] = {}
        self._delivered: set[str] = set()  # node ids whose pending credential went to a stream
        # contested nodes: their open streams end (api_agent.stream), every request is refused
        contested = self._db.execute("SELECT node_id FROM nodes WHERE contested_at IS NOT NULL")
        self.contested = {row[0] for row in contested}
        # nodes whose inventory record did not fit what is held: memory only (a restart
        # forgets it; the node's next changes record does not fit either and asks again).
        self.inventory_behind: set[str] = set()
        self.path.chmod(0o600)
        self.epoch = self._check_epoch()

    # ------------------------------------------------------------------ epoch

    def _check_epoch(self) -> str:
        """The command store's identity, sent on every stream (docs/protocol.md, Epoch).

        A new database gets a random epoch. A database put back from an older copy (a
        restore: its last command is below the highest sequence number this data directory
        ever handed out, kept in a file beside it) gets a new one, so agents holding a
        cursor from the lost future reset it instead of waiting for numbers already used."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'epoch'").fetchone()
        last_seq = self._last_seq()
        high_epoch, high_seq = self._read_high_water()
        if row is None or (high_epoch == row[0] and last_seq < high_seq):
            epoch = secrets.token_hex(8)
            self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('epoch', ?)", (epoch,))
        else:
            epoch = row[0]
        self._write_high_water(epoch, last_seq)
        return epoch

    def high_seq(self) -> int:
        """The highest sequence number this command store has issued (sent in `hello`)."""
        with self._lock:
            return self._last_seq()

    def _last_seq(self) -> int:
        row = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'commands'").fetchone()
        return int(row[0]) if row else 0

    def _read_high_water(self) -> tuple[str | None, int]:
        try:
            epoch, seq = self._high_water_path.read_text().split()
            return epoch, int(seq)
        except (OSError, ValueError):
            return None, 0

    def _write_high_water(self, epoch: str, seq: int) -> None:
        tmp = self._high_water_path.with_suffix(".tmp")
        tmp.write_text(f"{epoch} {seq}\n")
        os.replace(tmp, self._high_water_path)

    # ------------------------------------------------------------------ enrollment

    def mint_token(self) -> str:
        token = "fdn_enr_" + secrets.token_urlsafe(24)
        with self._lock:
            self._db.execute(
                "INSERT INTO tokens (token_hash, created_at) VALUES (?, ?)", (secret_hash(token), time.time())
            )
        return token

    def enroll(self, token: str, facts: dict[str, Any], attempt: str | None = None) -> tuple[str, str]:
        """Spend the token; returns (node_id, credential). Raises TokenRefused.

        A spent token is answered once more, for the same node with a fresh credential, when
        the same enrollment attempt id comes back within ENROLL_RETRY_WINDOW_S and the node
        has never been seen: the agent died before it could write its state file."""
        node_id = "node-" + uuid.uuid4().hex[:12]
        credential = "fdn_cred_" + secrets.token_urlsafe(32)
        now = time.time()
        token_hash = secret_hash(token)
        attempt_hash = secret_hash(attempt) if attempt else None
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute(
                    "SELECT used_at, node_id, attempt_hash FROM tokens WHERE token_hash = ?", (token_hash,)
                ).fetchone()
                if row is None:
                    raise TokenRefused("unknown enrollment token")
                used_at, used_by, used_attempt = row
                if used_at is not None:
                    if not (
                        attempt_hash
                        and attempt_hash == used_attempt
                        and now - used_at < ENROLL_RETRY_WINDOW_S
                        and self._never_seen(used_by)
                    ):
                        raise TokenRefused("enrollment token already used")
                    node_id = used_by
                    self._db.execute(
                        "UPDATE nodes SET credential_hash = ? WHERE node_id = ?", (secret_hash(credential), node_id)
                    )
                else:
                    self._db.execute(
                        "UPDATE tokens SET used_at = ?, node_id = ?, attempt_hash = ? WHERE token_hash = ?",
                        (now, node_id, attempt_hash, token_hash),
                    )
                    self._db.execute(
                        "INSERT INTO nodes (node_id, credential_hash, enrolled_at, facts) VALUES (?, ?, ?, ?)",
                        (node_id, secret_hash(credential), now, orjson.dumps(facts)),
                    )
                    self._note_fingerprint(node_id, facts.get("fingerprint"), now)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return node_id, credential

    def _never_seen(self, node_id: str) -> bool:
        row = self._db.execute("SELECT last_seen_at, revoked FROM nodes WHERE node_id = ?", (node_id,)).fetchone()
        return row is not None and row[0] is None and not row[1]

    def node_for_credential(self, credential: str, stream: bool = False) -> tuple[str, bool] | None:
        """(node_id, revoked) of the credential, or None when unknown; rotation.Contested when
        its node is contested (or this use contests it). The first request with a rotation's
        new credential confirms it: from then on the old one is refused."""
        hashed = secret_hash(credential)
        with self._lock:
            row = self._db.execute(
                "SELECT node_id, revoked, contested_at FROM nodes WHERE credential_hash = ?", (hashed,)
            ).fetchone()
            if row is None:
                row = self._db.execute(
                    "SELECT node_id, revoked, contested_at, credential_hash FROM nodes"
                    " WHERE pending_credential_hash = ?",
                    (hashed,),
                ).fetchone()
                if row is not None:
                    rotation.retire(self._db, row[0], row[3], "replaced")
                    self._db.execute(
                        "UPDATE nodes SET credential_hash = ?, pending_credential_hash = NULL WHERE node_id = ?",
                        (hashed, row[0]),
                    )
                    self.pending_credentials.pop(row[0], None)
                    self._delivered.discard(row[0])
            if row is None:
                contested = rotation.contest_if_retired(self._db, hashed, stream)
                if contested is None:
                    return None
                self._contest(contested)
                raise rotation.Contested()
            if row[2] is not None:
                raise rotation.Contested()
            if not row[1]:
                self._db.execute("UPDATE nodes SET last_seen_at = ? WHERE node_id = ?", (time.time(), row[0]))
        return (row[0], bool(row[1]))

    def credential_for_stream(self, node_id: str) -> str | None:
        """The pending credential for the stream just opened (None when no rotation is
        pending). Each stream gets its own: one an earlier stream was given is withdrawn and
        a fresh one issued, so a machine that lost it in a crash (however its old stream
        ended) gets another, and of two machines asking one ends up using a withdrawn one."""
        with self._lock:
            row = self._db.execute(
                "SELECT pending_credential_hash FROM nodes WHERE node_id = ? AND contested_at IS NULL", (node_id,)
            ).fetchone()
            if row is None or row[0] is None:
                return None
            pending = self.pending_credentials.get(node_id)
            if pending is None or node_id in self._delivered:  # delivered before, or lost with a restart
                rotation.retire(self._db, node_id, row[0], "withdrawn")
                pending = rotation.new_credential()
                self._db.execute(
                    "UPDATE nodes SET pending_credential_hash = ? WHERE node_id = ?", (secret_hash(pending), node_id)
                )
                self.pending_credentials[node_id] = pending
            self._delivered.add(node_id)
            return pending

    def _contest(self, node_id: str) -> None:
        pending = self.pending_credentials.pop(node_id, None)
        if pending is not None:  # its use says why it is refused
            rotation.retire(self._db, node_id, secret_hash(pending), "withdrawn")
        rotation.contest(self._db, node_id)
        self._delivered.discard(node_id)
        self.contested.add(node_id)

    def rotate_credential(self, node_id: str) -> bool:
        """Issue the node's next credential (delivered on its stream); the current one stays
        valid until the new one is used. A rotation already pending is kept (the machine may
        hold it on disk, unconfirmed). False when no such node (or revoked, or contested)."""
        credential = rotation.new_credential()
        with self._lock:
            cur = self._db.execute(
                "UPDATE nodes SET pending_credential_hash = ? WHERE node_id = ? AND revoked = 0"
                " AND contested_at IS NULL AND pending_credential_hash IS NULL",
                (secret_hash(credential), node_id),
            )
            if cur.rowcount:
                self.pending_credentials[node_id] = credential
                self._delivered.discard(node_id)
                return True
            row = self._db.execute(
                "SELECT 1 FROM nodes WHERE node_id = ? AND revoked = 0 AND contested_at IS NULL", (node_id,)
            ).fetchone()
        return row is not None

    def credential_rotating(self, node_id: str) -> bool:
        with self._lock:
            row = self._db.execute("SELECT pending_credential_hash FROM nodes WHERE node_id = ?", (node_id,)).fetchone()
        return bool(row and row[0])

    def revoke(self, node_id: str) -> bool:
        with self._lock:
            cur = self._db.execute("UPDATE nodes SET revoked = 1 WHERE node_id = ?", (node_id,))
        return cur.rowcount > 0

    # ------------------------------------------------------------------ commands

    def add_command(
        self, node_id: str, kind: str, spec: Any, command_id: str | None, deadline: float | None
    ) -> dict[str, Any]:
        command_id = command_id or uuid.uuid4().hex
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO commands (id, node_id, kind, spec, deadline, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (command_id, node_id, kind, orjson.dumps(spec), deadline, time.time()),
            )
            row = self._db.execute("SELECT seq, node_id FROM commands WHERE id = ?", (command_id,)).fetchone()
            self._write_high_water(self.epoch, self._last_seq())
        return {"id": command_id, "seq": row[0], "node_id": row[1]}

    def commands_after(self, node_id: str, after: int, limit: int = 100) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, id, kind, spec, deadline FROM commands WHERE node_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (node_id, after, limit),
            ).fetchall()
        return [
            {"type": "command", "seq": seq, "id": cid, "kind": kind, "spec": _json(spec), "deadline": deadline}
            for seq, cid, kind, spec, deadline in rows
        ]

    def command(self, command_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT id, node_id, seq, kind, spec, deadline, created_at FROM commands WHERE id = ?", (command_id,)
            ).fetchone()
            if row is None:
                return None
            timeline = self._db.execute(
                "SELECT data, ts, received_at FROM records WHERE command_id = ? AND kind = ? ORDER BY ts, received_at",
                (command_id, protocol.TIMELINE),
            ).fetchall()
        records = [{**_json(data), "ts": ts, "received_at": received} for data, ts, received in timeline]
        return {
            "id": row[0],
            "node_id": row[1],
            "seq": row[2],
            "kind": row[3],
            "spec": _json(row[4]),
            "deadline": row[5],
            "created_at": row[6],
            "state": records[-1]["state"] if records else "queued",
            "timeline": records,
        }

    # ------------------------------------------------------------------ uplink

    def store_records(self, node_id: str, records: list[dict[str, Any]]) -> list[str]:
        """Store each record once (dedup by id); apply heartbeats and inventory. Returns the acked ids."""
        acked: list[str] = []
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for record in records:
                    acked.append(record["id"])
                    data = record["data"]
                    command_id = data.get("command_id") if record["kind"] == protocol.TIMELINE else None
                    cur = self._db.execute(
                        "INSERT OR IGNORE INTO records (node_id, id, kind, ts, received_at, command_id, data)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (node_id, record["id"], record["kind"], record.get("ts"), now, command_id, orjson.dumps(data)),
                    )
                    if cur.rowcount:
                        self._apply(node_id, record, now)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return acked

    def _note_drain(self, node_id: str, data: dict[str, Any]) -> None:
        """A node.* command that succeeded: its drain state is the node's now (its next detailed
        heartbeat, which says the same, may come an interval later)."""
        result = data.get("result")
        if data.get("state") != protocol.SUCCEEDED or not isinstance(result, dict):
            return
        if result.get("state") not in protocol.DRAIN_STATES:
            return
        command = self._db.execute(
            "SELECT kind FROM commands WHERE id = ? AND node_id = ?", (data.get("command_id"), node_id)
        ).fetchone()
        if command is None or command[0] not in ("node.drain", "node.undrain"):
            return
        row = self._db.execute("SELECT heartbeat FROM nodes WHERE node_id = ?", (node_id,)).fetchone()
        heartbeat = (_json(row[0]) or {}) if row else {}
        drain = {"state": result["state"], "command_id": data["command_id"]}
        heartbeat["drain"] = {**(heartbeat.get("drain") or {}), **drain}
        self._db.execute("UPDATE nodes SET heartbeat = ? WHERE node_id = ?", (orjson.dumps(heartbeat), node_id))

    def _note_fingerprint(self, node_id: str, fingerprint: Any, now: float) -> None:
        if isinstance(fingerprint, str) and 0 < len(fingerprint) <= 128:
            self._db.execute(
                "INSERT INTO fingerprints (node_id, fingerprint, first_seen, last_seen) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (node_id, fingerprint) DO UPDATE SET last_seen = excluded.last_seen",
                (node_id, fingerprint, now, now),
            )

    def _fingerprints(self, node_id: str) -> tuple[str | None, bool]:
        """(the latest fingerprint, whether another was heard within SHARED_IDENTITY_WINDOW_S of it)."""
        rows = self._db.execute(
            "SELECT fingerprint, last_seen FROM fingerprints WHERE node_id = ? ORDER BY last_seen DESC LIMIT 2",
            (node_id,),
        ).fetchall()
        if not rows:
            return None, False
        return rows[0][0], len(rows) > 1 and rows[0][1] - rows[1][1] <= SHARED_IDENTITY_WINDOW_S

    def _apply(self, node_id: str, record: dict[str, Any], now: float) -> None:
        if record["kind"] == protocol.HEARTBEAT:
            # A lean beat carries only the pulse; the detail (worker table, version, ...) of
            # the last beat that had it stays (docs/protocol.md, "Heartbeat record").
            row = self._db.execute("SELECT heartbeat FROM nodes WHERE node_id = ?", (node_id,)).fetchone()
            merged = {**((_json(row[0]) or {}) if row else {}), **record["data"]}
            self._note_fingerprint(node_id, record["data"].get("fingerprint"), now)
            self._db.execute(
                "UPDATE nodes SET last_heartbeat_at = ?, heartbeats = heartbeats + 1, heartbeat = ? WHERE node_id = ?",
                (now, orjson.dumps(merged), node_id),
            )
        elif record["kind"] == protocol.TRAFFIC:
            clusters.store_traffic(self._db, node_id, record["data"], now)
        elif record["kind"] == protocol.TIMELINE:
            self._note_drain(node_id, record["data"])
        elif record["kind"] == protocol.HOST_REQUEST:
            command = host_requests.answer(record["data"], now)
            if command is not None:  # the answer: a node.* command, id from the request (once)
                kind, spec, command_id = command
                self._db.execute(
                    "INSERT OR IGNORE INTO commands (id, node_id, kind, spec, deadline, created_at)"
                    " VALUES (?, ?, ?, ?, NULL, ?)",
                    (command_id, node_id, kind, orjson.dumps(spec), now),
                )
                self._write_high_water(self.epoch, self._last_seq())
        elif record["kind"] == protocol.INVENTORY:
            row = self._db.execute("SELECT inventory FROM nodes WHERE node_id = ?", (node_id,)).fetchone()
            received = receive(_json(row[0]) if row else None, record["data"])
            if received.behind:  # the stream asks the agent for a full record
                self.inventory_behind.add(node_id)
            if received.held is not None:  # None: a record of a state we do not hold
                self.inventory_behind.discard(node_id)
                self._db.execute(
                    "UPDATE nodes SET inventory = ?, inventory_at = ? WHERE node_id = ?",
                    (orjson.dumps(received.held), now, node_id),
                )

    # ------------------------------------------------------------------ clusters (clusters.py)

    def set_cluster(self, cluster: str, node_ids: list[str]) -> list[str]:
        """Raises KeyError naming an unknown node."""
        with self._lock:
            return clusters.set_members(self._db, cluster, node_ids)

    def members(self, cluster: str) -> list[str]:
        with self._lock:
            return clusters.members(self._db, cluster)

    def peers_message(self, node_id: str) -> dict[str, Any]:
        with self._lock:
            return clusters.peers_message(self._db, node_id)

    def traffic_matrix(self, cluster: str) -> dict[str, Any]:
        nodes = self.nodes()
        with self._lock:
            return clusters.traffic_matrix(self._db, cluster, nodes)

    def records(self, node_id: str, kind: str, limit: int = 10_000) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, ts, received_at, data FROM records WHERE node_id = ? AND kind = ?"
                " ORDER BY received_at, ts LIMIT ?",
                (node_id, kind, limit),
            ).fetchall()
        return [{"id": rid, "ts": ts, "received_at": received, "data": _json(data)} for rid, ts, received, data in rows]

    def count_records(self, node_id: str | None = None) -> dict[str, int]:
        with self._lock:
            if node_id is None:
                rows = self._db.execute("SELECT kind, COUNT(*) FROM records GROUP BY kind").fetchall()
            else:
                rows = self._db.execute(
                    "SELECT kind, COUNT(*) FROM records WHERE node_id = ? GROUP BY kind", (node_id,)
                ).fetchall()
        return dict(rows)

    # ------------------------------------------------------------------ nodes

    def nodes(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT node_id, revoked, enrolled_at, facts, last_seen_at, last_heartbeat_at, heartbeats, heartbeat,"
                " inventory_at, inventory FROM nodes ORDER BY enrolled_at"
            ).fetchall()
            identities = {row[0]: self._fingerprints(row[0]) for row in rows}
            rotating = dict(self._db.execute("SELECT node_id, pending_credential_hash IS NOT NULL FROM nodes"))
            contested = dict(self._db.execute("SELECT node_id, contested_at FROM nodes"))
        out = []
        for node_id, revoked, enrolled_at, facts, seen, hb_at, hb_count, heartbeat, inv_at, inventory in rows:
            facts = _json(facts)
            heartbeat = _json(heartbeat) or {}
            inventory = _json(inventory) or {}
            fingerprint, shared = identities[node_id]
            out.append(
                {
                    "node_id": node_id,
                    "agent_id": facts.get("agent_id"),
                    "host": facts.get("host"),
                    "advertise_host": facts.get("advertise_host"),
                    "advertise_scheme": facts.get("advertise_scheme"),
                    "version": heartbeat.get("version") or facts.get("version"),
                    "capabilities": heartbeat.get("capabilities") or facts.get("capabilities"),
                    "platform": facts.get("platform"),
                    "revoked": bool(revoked),
                    "enrolled_at": enrolled_at,
                    "last_seen_at": seen,
                    "last_heartbeat_at": hb_at,
                    "heartbeats": hb_count,
                    "uptime_s": heartbeat.get("uptime_s"),
                    "connection": heartbeat.get("connection"),
                    # schedulable, cordoned, draining, drained (the node's own word, kept across restarts)
                    "drain": heartbeat.get("drain") or {"state": protocol.SCHEDULABLE},
                    "workers": heartbeat.get("workers"),
                    "inventory_at": inv_at,
                    # where the machine stands: the inventory's, else what it said at enrollment
                    "labels": inventory.get("labels", facts.get("labels")) or {},
                    "topology": inventory.get("topology", facts.get("topology")),
                    "conditions": {
                        name: state
                        for name, state in (inventory.get("conditions") or {}).items()
                        if isinstance(state, dict) and state.get("active") is not False
                    },
                    "fingerprint": fingerprint or facts.get("fingerprint"),
                    "shared_identity": shared or contested.get(node_id) is not None,
                    "identity_contested_at": contested.get(node_id),
                    "credential_rotating": bool(rotating.get(node_id)),
                }
            )
        return out

    def node(self, node_id: str) -> dict[str, Any] | None:
        return next((n for n in self.nodes() if n["node_id"] == node_id), None)

    def inventory(self, node_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT inventory, inventory_at FROM nodes WHERE node_id = ?", (node_id,)).fetchone()
        if row is None:
            return None
        return {"node_id": node_id, "inventory": _json(row[0]), "received_at": row[1]}

    # ------------------------------------------------------------------ logs

    def store_log_push(self, node_id: str, push: dict[str, Any]) -> int:
        """Keep the lines of one Loki push body; returns how many."""
        rows = []
        for stream in push.get("streams") or []:
            labels = orjson.dumps(stream.get("stream") or {})
            for value in stream.get("values") or []:
                ts_ns, line = str(value[0]), str(value[1])
                metadata = orjson.dumps(value[2]) if len(value) > 2 else None
                rows.append((node_id, labels, ts_ns, line, metadata))
        with self._lock:
            self._db.executemany(
                "INSERT INTO log_lines (node_id, labels, ts_ns, line, metadata) VALUES (?, ?, ?, ?, ?)", rows
            )
        return len(rows)

    def log_lines(self, node_id: str, limit: int = 10_000) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT labels, ts_ns, line, metadata FROM log_lines WHERE node_id = ? ORDER BY n LIMIT ?",
                (node_id, limit),
            ).fetchall()
        return [
            {"labels": _json(labels), "ts": ts, "line": line, "metadata": _json(metadata)}
            for labels, ts, line, metadata in rows
        ]

    def close(self) -> None:
        with self._lock:
            self._db.close()
