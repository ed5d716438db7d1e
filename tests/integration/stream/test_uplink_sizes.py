"""One record the backend will not take never blocks the uplink: the real agent on
the real reference backend, whose body limit is lowered (fault switch max_body_bytes) so it
answers 413 on demand: the record is set aside, not retried forever with its batch, and
what comes after it is delivered."""

from __future__ import annotations

import time

from faden_agent import protocol
from faden_agent.backend.producer import Reports
from faden_agent.config import load_config
from tests.support.agentproc import wait_for
from tests.support.backendproc import agent_on_backend, backend  # noqa: F401

KIB = 1024


def delivered(backend, node_id: str, prefix: str) -> dict[str, dict]:
    events = [r["data"] for r in backend.events(node_id)]
    return {e["record"]: e for e in events if str(e.get("record", "")).startswith(prefix)}


def test_a_record_refused_with_413_becomes_a_stub_and_everything_after_it_is_delivered(backend, agent_on_backend):
    agent, node = agent_on_backend()
    backend.admin.faults(max_body_bytes=64 * KIB)
    producer = Reports(load_config(agent.env))
    try:
        before = [f"sz:before:{i}" for i in range(20)]
        after = [f"sz:after:{i}" for i in range(200)]
        for record_id in before:
            producer.put(protocol.EVENT, {"type": "test.size", "record": record_id}, record_id)
        # Under MAX_RECORD_BYTES, so sent as it is; over this backend's limit, so refused with 413.
        producer.put(protocol.EVENT, {"type": "test.size", "record": "sz:big", "blob": "x" * (200 * KIB)}, "sz:big")
        # Over MAX_RECORD_BYTES: never sent whole, a stub from the start.
        producer.put(
            protocol.EVENT,
            {"type": "test.size", "record": "sz:huge", "blob": "y" * (protocol.MAX_RECORD_BYTES + 1)},
            "sz:huge",
        )
        for record_id in after:
            producer.put(protocol.EVENT, {"type": "test.size", "record": record_id, "pad": "z" * 400}, record_id)
    finally:
        producer.close()
    want = set(before) | set(after) | {"sz:big", "sz:huge"}
    got = wait_for(
        lambda: (d := delivered(backend, node["node_id"], "sz:")) and want <= set(d) and d,
        60,
        what="every record, the big ones as stubs",
    )
    for big in ("sz:big", "sz:huge"):
        stub = got[big]
        assert stub["truncated"] is True and "blob" not in stub and stub["type"] == "test.size", stub
        assert stub["original_bytes"] > 200 * KIB
    assert all("truncated" not in got[r] for r in before + after)
    statuses = [r["status"] for r in backend.admin.requests_log(0) if r["path"].endswith("/uplink")]
    assert 413 in statuses  # the backend really refused, and the agent split and went on
    time.sleep(1)
    assert agent.workers()["stream"]["restarts"] == 0
