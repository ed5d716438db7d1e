"""Uplink batches bounded in bytes, and the stub that stands in for a record too large to send."""

from __future__ import annotations

import orjson

from faden_agent import protocol
from faden_agent.backend.outbox import make_record
from faden_agent.workers.stream.uplink import bounded_batch, is_stub, truncated


def size(record) -> int:
    return len(orjson.dumps(record))


def test_a_batch_stops_before_the_byte_budget_and_keeps_order():
    records = [make_record(protocol.EVENT, {"n": i, "pad": "x" * (100 * 1024)}) for i in range(100)]
    batch = bounded_batch(records)
    assert 1 < len(batch) < len(records)
    assert sum(size(r) for r in batch) <= protocol.MAX_UPLINK_BATCH_BYTES
    assert [r["data"]["n"] for r in batch] == list(range(len(batch)))


def test_a_record_over_the_record_budget_travels_as_its_stub():
    big = make_record(
        protocol.TIMELINE,
        {
            "command_id": "c-1",
            "state": "failed",
            "reason": "docker_error",
            "message": "m" * (protocol.MAX_RECORD_BYTES + 1),
            "result": {"a": [1] * 10},
        },
    )
    (stub,) = bounded_batch([big])
    assert is_stub(stub) and stub["id"] == big["id"] and stub["kind"] == big["kind"]
    assert stub["data"] == {
        "command_id": "c-1",
        "state": "failed",
        "reason": "docker_error",
        "truncated": True,
        "original_bytes": size(big),
    }
    assert size(stub) < 1024


def test_a_stub_stays_small_whatever_the_record_holds():
    record = make_record(protocol.EVENT, {f"k{i}": "v" * 150 for i in range(10_000)})
    stub = truncated(record, size(record))
    assert size(stub) < (protocol.QUOTE_BYTES + 16) * 40 and stub["data"]["truncated"] is True
    assert truncated({"id": "x", "kind": "event", "data": "not an object"}, 5)["data"] == {
        "truncated": True,
        "original_bytes": 5,
    }
