"""Clusters in the reference backend: which machines form one (set by the admin), the
peers each agent is told about (downlink `peers`), and the latest traffic record of each
machine, read back as the cluster's traffic matrix (docs/protocol.md, "Traffic record"),
beside the latest active probe of each pair (traffic.probe results, "Active probes").
"""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from faden_agent import protocol

SCHEMA = """
CREATE TABLE IF NOT EXISTS cluster_members (
    node_id TEXT PRIMARY KEY,
    cluster TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS traffic_latest (
    node_id TEXT PRIMARY KEY,
    data BLOB NOT NULL,
    collected_at REAL,
    received_at REAL NOT NULL
);
"""


def set_members(db: sqlite3.Connection, cluster: str, node_ids: list[str]) -> list[str]:
    """Make exactly `node_ids` the cluster's machines (a machine is in one cluster at most)."""
    unknown = [n for n in node_ids if db.execute("SELECT 1 FROM nodes WHERE node_id = ?", (n,)).fetchone() is None]
    if unknown:
        raise KeyError(f"no node {unknown[0]}")
    db.execute("DELETE FROM cluster_members WHERE cluster = ?", (cluster,))
    db.executemany(
        "INSERT OR REPLACE INTO cluster_members (node_id, cluster) VALUES (?, ?)", [(n, cluster) for n in node_ids]
    )
    return members(db, cluster)


def members(db: sqlite3.Connection, cluster: str) -> list[str]:
    rows = db.execute(
        "SELECT m.node_id FROM cluster_members m JOIN nodes n USING (node_id) WHERE m.cluster = ?"
        " ORDER BY n.enrolled_at",
        (cluster,),
    ).fetchall()
    return [row[0] for row in rows]


def peers_message(db: sqlite3.Connection, node_id: str) -> dict[str, Any]:
    """The downlink `peers` message for a node: its cluster's other machines and addresses."""
    row = db.execute("SELECT cluster FROM cluster_members WHERE node_id = ?", (node_id,)).fetchone()
    if row is None:
        return {"type": "peers", "cluster": None, "peers": []}
    peers = []
    for other in members(db, row[0]):
        if other == node_id:
            continue
        facts = orjson.loads(db.execute("SELECT facts FROM nodes WHERE node_id = ?", (other,)).fetchone()[0])
        if facts.get("advertise_host"):
            peers.append({"node_id": other, "address": facts["advertise_host"]})
    return {"type": "peers", "cluster": row[0], "peers": peers}


def store_traffic(db: sqlite3.Connection, node_id: str, data: dict[str, Any], now: float) -> None:
    """Keep the newest traffic record of a node (a late resend never replaces a newer one)."""
    collected = data.get("collected_at") if isinstance(data.get("collected_at"), (int, float)) else None
    db.execute(
        "INSERT INTO traffic_latest (node_id, data, collected_at, received_at) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (node_id) DO UPDATE SET data = excluded.data, collected_at = excluded.collected_at,"
        " received_at = excluded.received_at"
        " WHERE excluded.collected_at IS NULL OR traffic_latest.collected_at IS NULL"
        " OR excluded.collected_at >= traffic_latest.collected_at",
        (node_id, orjson.dumps(data), collected, now),
    )


def traffic_matrix(db: sqlite3.Connection, cluster: str, nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """Every machine of the cluster with its latest traffic record, and whether its agent
    reports traffic at all (the capability in its heartbeat)."""
    by_id = {n["node_id"]: n for n in nodes}
    machines = []
    for node_id in members(db, cluster):
        node = by_id.get(node_id, {})
        row = db.execute("SELECT data, received_at FROM traffic_latest WHERE node_id = ?", (node_id,)).fetchone()
        machines.append(
            {
                "node_id": node_id,
                "agent_id": node.get("agent_id"),
                "address": node.get("advertise_host"),
                "version": node.get("version"),
                "capable": protocol.TRAFFIC_CAPABILITY in (node.get("capabilities") or ()),
                "probe_capable": protocol.PROBE_CAPABILITY in (node.get("capabilities") or ()),
                "traffic": orjson.loads(row[0]) if row else None,
                "received_at": row[1] if row else None,
            }
        )
    return {"cluster": cluster, "machines": machines, "probes": probe_results(db, cluster)}


def probe_results(db: sqlite3.Connection, cluster: str) -> list[dict[str, Any]]:
    """The latest probe entry of each (prober, probed machine) pair of the cluster, from the
    results of succeeded traffic.probe commands: {"from", "to", ...the entry}."""
    ids = members(db, cluster)
    if not ids:
        return []
    rows = db.execute(
        "SELECT r.node_id, r.data FROM records r JOIN commands c ON c.id = r.command_id"
        f" WHERE c.kind = 'traffic.probe' AND r.kind = ? AND r.node_id IN ({', '.join('?' * len(ids))})",
        (protocol.TIMELINE, *ids),
    ).fetchall()
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for node_id, blob in rows:
        data = orjson.loads(blob)
        if data.get("state") != protocol.SUCCEEDED:
            continue
        for entry in (data.get("result") or {}).get("peers") or []:
            if not isinstance(entry, dict) or entry.get("machine") not in ids:
                continue
            key = (node_id, entry["machine"])
            if key not in latest or (entry.get("at") or 0) >= (latest[key].get("at") or 0):
                latest[key] = {"from": node_id, "to": entry["machine"], **entry}
    return sorted(latest.values(), key=lambda e: (e["from"], e["to"]))
