"""Full and unchanged records: the content hash ignores gauges, and what the outbox file
holds after each cycle (the real SQLite outbox, read back by a second Outbox)."""

from __future__ import annotations

import orjson

from faden_agent import protocol
from faden_agent.backend.outbox import Outbox
from faden_agent.backend.producer import Reports
from faden_agent.config import load_config
from faden_agent.protocol.inventory import apply_record
from faden_agent.workers.inventory.collector import Collector
from faden_agent.workers.inventory.probes import OK, OVERRUN, ProbeResult
from faden_agent.workers.inventory.record import (
    FULL,
    UNCHANGED,
    RecordEmitter,
    content_hash,
    only_usage,
    sections_from,
    without_usage,
)
from faden_agent.workers.inventory.worker import InventoryReporter

SAMPLE = {
    "host": {"hostname": "n1", "usage": {"load_avg": [0.1, 0.2, 0.3]}},
    "disks": [{"paths": ["/"], "usage": {"free": 10}}, {"paths": ["/x"], "error": "gone"}],
    "network": [{"name": "lo"}],
    "gpu": {
        "devices": [
            {"uuid": "GPU-1", "processes": [{"pid": 7, "usage": {"used_memory": 5}}], "usage": {"temperature_c": 40}}
        ]
    },
}


def test_usage_is_split_off_in_the_shape_of_the_record():
    assert without_usage(SAMPLE)["gpu"] == {"devices": [{"uuid": "GPU-1", "processes": [{"pid": 7}]}]}
    assert only_usage(SAMPLE) == {
        "host": {"usage": {"load_avg": [0.1, 0.2, 0.3]}},
        "disks": [{"usage": {"free": 10}}, None],
        "gpu": {"devices": [{"processes": [{"usage": {"used_memory": 5}}], "usage": {"temperature_c": 40}}]},
    }


def test_the_hash_ignores_gauges_but_not_facts():
    moved = orjson.loads(orjson.dumps(SAMPLE))
    moved["gpu"]["devices"][0]["usage"]["temperature_c"] = 77
    moved["disks"][0]["usage"]["free"] = 1
    assert content_hash(moved) == content_hash(SAMPLE)
    moved["gpu"]["devices"][0]["processes"].append({"pid": 8})
    assert content_hash(moved) != content_hash(SAMPLE)


def test_a_receiver_rebuilds_the_current_record_from_full_plus_unchanged():
    emitter = RecordEmitter()
    full = emitter.build(SAMPLE, now=1000)
    emitter.sent(full)
    moved = orjson.loads(orjson.dumps(SAMPLE))
    moved["gpu"]["devices"][0]["usage"]["temperature_c"] = 77
    moved["gpu"]["devices"][0]["processes"][0]["usage"]["used_memory"] = 9
    moved["host"]["usage"]["load_avg"] = [3.0, 2.0, 1.0]
    small = emitter.build(moved, now=1060)
    assert small["type"] == UNCHANGED
    held = apply_record(apply_record(None, full), small)
    assert held == {**full, **moved, "collected_at": 1060}  # what a full record of `moved` would hold
    # An unchanged record of another (older) state is ignored, never merged.
    assert apply_record(held, dict(small, hash="0" * 32)) is None
    assert apply_record(None, small) is None


def test_full_at_start_on_change_and_after_the_refresh_period():
    emitter = RecordEmitter(full_refresh_s=100)
    first = emitter.build(SAMPLE, now=1000)
    assert first["type"] == FULL and first["host"] == SAMPLE["host"]
    emitter.sent(first)
    second = emitter.build(SAMPLE, now=1050)
    assert second["type"] == UNCHANGED and second["hash"] == first["hash"]
    assert set(second) == {"schema", "type", "hash", "collected_at", "usage"}
    # Not handed to the outbox (sent() not called): still unchanged against the first.
    assert emitter.build(SAMPLE, now=1099)["type"] == UNCHANGED
    assert emitter.build(SAMPLE, now=1100)["type"] == FULL  # refresh due
    changed = dict(SAMPLE, network=[{"name": "lo"}, {"name": "eth0"}])
    assert emitter.build(changed, now=1060)["type"] == FULL


def test_a_failed_or_overrun_probe_keeps_its_last_data_marked_stale():
    last_good: dict = {}
    ok = sections_from({"docker": ProbeResult("docker", OK, data={"images": [1]})}, last_good, {"docker": 5})
    hung = sections_from(
        {"docker": ProbeResult("docker", OVERRUN, error="no answer within 5 s", since=123.0)}, last_good, {"docker": 5}
    )
    assert hung["docker"] == {"images": [1]}
    assert without_usage(hung["probes"]["docker"]) == {
        "status": "overrun",
        "error": "no answer within 5 s",
        "since": 123.0,
        "timeout_s": 5,
        "stale": True,
    }
    assert content_hash(hung) != content_hash(ok)  # the overrun itself is news: a full record
    never = sections_from({"gpu": ProbeResult("gpu", OVERRUN, since=1.0)}, {}, {"gpu": 5})
    assert never["gpu"] is None and "stale" not in never["probes"]["gpu"]


def test_two_cycles_without_change_leave_one_full_and_one_small_record_in_the_outbox(tmp_path):
    models = tmp_path / "models"
    config = load_config(
        {}, state_path=tmp_path / "state" / "state.json", runtime_dir=tmp_path / "run", disk_paths=(models,)
    )
    (tmp_path / "run").mkdir(mode=0o700)
    collector = Collector(config)
    # Real probes whose facts this test controls; Docker and network are shared with other
    # tests running in parallel (their containers and networks would be changes).
    collector.probes = [p for p in collector.probes if p.name in ("host", "disks", "gpu")]
    reports = Reports(config)
    reporter = InventoryReporter(collector, reports)
    reader = Outbox(config.state_dir)
    try:
        first = reporter.report()
        second = reporter.report()
        pending = reader.pending(100)
        assert [(r["kind"], r["data"]["type"]) for r in pending] == [
            (protocol.INVENTORY, FULL),
            (protocol.INVENTORY, UNCHANGED),
        ]
        full, small = pending
        assert full["data"]["hash"] == small["data"]["hash"] == first["hash"]
        assert full["id"].startswith("inv:") and full["data"]["disks"] and full["data"]["gpu"]["devices"] == []
        assert small["data"]["collected_at"] == second["collected_at"]
        assert len(orjson.dumps(small)) * 2 < len(orjson.dumps(full))

        third = reporter.report()  # the unchanged slot is replaced, the full one stays
        assert [(r["data"]["type"], r["data"]["collected_at"]) for r in reader.pending(100)] == [
            (FULL, first["collected_at"]),
            (UNCHANGED, third["collected_at"]),
        ]

        models.mkdir()  # a configured path appears: a change
        fourth = reporter.report()
        kinds = [r["data"]["type"] for r in reader.pending(100)]
        assert fourth["type"] == FULL and fourth["hash"] != first["hash"]
        assert kinds == [FULL, FULL, UNCHANGED]  # no full record was ever replaced

        reader.ack([r["id"] for r in reader.pending(100)])
        assert reporter.report()["type"] == UNCHANGED and reader.count() == 1
    finally:
        reports.close()
        reader.close()


def test_unchanged_records_wait_for_the_usage_refresh_changes_do_not():
    emitter = RecordEmitter(full_refresh_s=3600, usage_refresh_s=300)
    emitter.sent(emitter.build(SAMPLE, now=1000))
    assert emitter.build(SAMPLE, now=1060) is None  # only gauges moved, not due
    changed = dict(SAMPLE, network=[{"name": "lo"}, {"name": "eth0"}])
    assert emitter.build(changed, now=1060)["type"] == FULL  # a change goes at once
    due = emitter.build(SAMPLE, now=1300)
    assert due["type"] == UNCHANGED
    emitter.sent(due)
    assert emitter.build(SAMPLE, now=1360) is None
