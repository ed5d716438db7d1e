"""The reference backend's store: single-use tokens, record dedup, command timelines, and the
inventory receiver rule (full replaces; unchanged refreshes the gauges of the same hash)."""

from __future__ import annotations

import pytest

from faden_agent import protocol
from faden_agent.devbackend.store import Store, TokenRefused


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path)
    yield s
    s.close()


def node(store: Store) -> str:
    node_id, _ = store.enroll(store.mint_token(), {"agent_id": "a"})
    return node_id


def record(kind, data, record_id, ts=1.0):
    return {"id": record_id, "kind": kind, "ts": ts, "data": data}


def test_tokens_are_single_use_and_stored_hashed(store, tmp_path):
    token = store.mint_token()
    node_id, credential = store.enroll(token, {"agent_id": "a"})
    with pytest.raises(TokenRefused):
        store.enroll(token, {"agent_id": "b"})
    assert store.node_for_credential(credential) == (node_id, False)
    files = list(tmp_path.glob("backend.sqlite*"))  # the WAL holds the newest pages
    raw = b"".join(path.read_bytes() for path in files)
    assert len(files) >= 2 and node_id.encode() in raw
    assert token.encode() not in raw and credential.encode() not in raw


def test_timeline_dedups_and_orders_by_ts(store):
    node_id = node(store)
    store.add_command(node_id, "no.such.kind", {}, "c1", None)
    rejected = protocol.timeline_data("c1", protocol.REJECTED, reason="unknown_kind", message="no")
    received = protocol.timeline_data("c1", protocol.RECEIVED)
    store.store_records(node_id, [record(protocol.TIMELINE, rejected, "tl:c1:rejected:0", ts=2.0)])
    store.store_records(
        node_id,
        [
            record(protocol.TIMELINE, received, "tl:c1:received:0", ts=1.0),
            record(protocol.TIMELINE, rejected, "tl:c1:rejected:0", ts=2.0),
        ],
    )
    command = store.command("c1")
    assert [t["state"] for t in command["timeline"]] == ["received", "rejected"]
    assert command["state"] == "rejected"


def test_inventory_receiver_rule(store):
    node_id = node(store)
    full = {"type": "full", "hash": "h1", "collected_at": 1.0, "host": {"name": "x", "usage": {"load": 1}}}
    store.store_records(node_id, [record(protocol.INVENTORY, full, "inv:1")])
    unchanged = {"type": "unchanged", "hash": "h1", "collected_at": 2.0, "usage": {"host": {"usage": {"load": 5}}}}
    store.store_records(node_id, [record(protocol.INVENTORY, unchanged, "inv:2")])
    held = store.inventory(node_id)["inventory"]
    assert held["host"] == {"name": "x", "usage": {"load": 5}} and held["collected_at"] == 2.0
    stale = {"type": "unchanged", "hash": "old", "collected_at": 3.0, "usage": {}}
    store.store_records(node_id, [record(protocol.INVENTORY, stale, "inv:3")])
    assert store.inventory(node_id)["inventory"] == held


def test_a_spent_token_is_answered_again_only_for_the_same_unseen_attempt(store):
    token = store.mint_token()
    node_id, first = store.enroll(token, {"agent_id": "a"}, attempt="attempt-1")
    # the agent died before writing its state file: same token, same attempt -> same node
    again, second = store.enroll(token, {"agent_id": "a"}, attempt="attempt-1")
    assert again == node_id and second != first
    assert store.node_for_credential(first) is None  # the lost credential is dead
    for other in (None, "attempt-2"):
        with pytest.raises(TokenRefused, match="already used"):
            store.enroll(token, {"agent_id": "a"}, attempt=other)
    assert store.node_for_credential(second) == (node_id, False)  # now the node has been seen
    with pytest.raises(TokenRefused, match="already used"):
        store.enroll(token, {"agent_id": "a"}, attempt="attempt-1")


def test_a_lean_heartbeat_keeps_the_detail_of_the_last_full_one(store):
    node_id = node(store)
    workers = [{"name": "logs", "state": "RUNNING", "pid": 7, "restarts": 0}]
    full = {
        "beat": 0,
        "due_at": 1.0,
        "uptime_s": 1.0,
        "version": "1.2.3",
        "workers": workers,
        "connection": {"state": "connected"},
    }
    store.store_records(node_id, [record(protocol.HEARTBEAT, full, "hb:0")])
    store.store_records(node_id, [record(protocol.HEARTBEAT, {"beat": 1, "due_at": 16.0, "uptime_s": 16.0}, "hb:1")])
    (seen,) = store.nodes()
    assert seen["workers"] == workers and seen["version"] == "1.2.3" and seen["connection"] == {"state": "connected"}
    assert seen["uptime_s"] == 16.0 and seen["heartbeats"] == 2
    changed = [{**workers[0], "state": "BACKOFF", "pid": None, "restarts": 1}]
    store.store_records(node_id, [record(protocol.HEARTBEAT, {**full, "beat": 2, "workers": changed}, "hb:2")])
    assert store.nodes()[0]["workers"] == changed


def test_host_requests_are_answered_once_and_a_node_command_sets_the_drain_state(store):
    node_id = node(store)
    assert store.node(node_id)["drain"] == {"state": protocol.SCHEDULABLE}
    request = {"action": "drain", "request_id": "r1", "deadline_s": 30, "expires_at": 2e9}
    store.store_records(node_id, [record(protocol.HOST_REQUEST, request, "hr:r1")])
    store.store_records(node_id, [record(protocol.HOST_REQUEST, request, "hr:r1")])  # a resend
    commands = store.commands_after(node_id, 0)
    assert [(c["id"], c["kind"], c["spec"]) for c in commands] == [
        ("host-r1", "node.drain", {"request_id": "r1", "stop": True, "deadline_s": 30.0})
    ]
    expired = {"action": "uncordon", "request_id": "r2", "expires_at": 1.0}
    hostile = {"action": "reboot", "request_id": "r3"}
    late = [record(protocol.HOST_REQUEST, d, f"hr:{d['request_id']}") for d in (expired, hostile)]
    store.store_records(node_id, late)
    assert len(store.commands_after(node_id, 0)) == 1  # neither an expired nor an unknown action is answered
    forget = {"action": "gpu.forget", "request_id": "r4", "uuid": "GPU-gone", "expires_at": 2e9}
    no_uuid = {"action": "gpu.forget", "request_id": "r5", "uuid": 7}
    store.store_records(node_id, [record(protocol.HOST_REQUEST, d, f"hr:{d['request_id']}") for d in (forget, no_uuid)])
    assert [(c["id"], c["kind"], c["spec"]) for c in store.commands_after(node_id, 0)][1:] == [
        ("host-r4", "gpu.forget", {"request_id": "r4", "uuid": "GPU-gone"})
    ]

    done = protocol.timeline_data("host-r1", protocol.SUCCEEDED, reason="ok", message="", result={"state": "drained"})
    store.store_records(node_id, [record(protocol.TIMELINE, done, "tl:host-r1:succeeded:0")])
    assert store.node(node_id)["drain"]["state"] == protocol.DRAINED  # before the node's next detailed beat
    other = store.add_command(node_id, "container.stop", {"name": "x"}, "c-9", None)
    said = {"state": protocol.CORDONED}
    fake = protocol.timeline_data(other["id"], protocol.SUCCEEDED, reason="ok", message="", result=said)
    store.store_records(node_id, [record(protocol.TIMELINE, fake, "tl:c-9:succeeded:0")])
    assert store.node(node_id)["drain"]["state"] == protocol.DRAINED  # only node.* commands say it
