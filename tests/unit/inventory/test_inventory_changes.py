"""Changes records and gauges by threshold and age: the reference backend's store,
fed 1,000 random changes, holds what a full record of the same moment says; a receiver that
fell behind asks for a full record; gauges go when they moved past their threshold or aged;
a backend of the previous version gets the previous records; NVLink links go compact."""

from __future__ import annotations

import random
import re
from pathlib import Path

import orjson
import pytest

from faden_agent import protocol
from faden_agent.devbackend.store import Store
from faden_agent.node import backend_accepts
from faden_agent.protocol.inventory import CHANGES, FULL, UNCHANGED, content, content_hash, receive, without_usage
from faden_agent.workers.inventory import gauge_rules
from faden_agent.workers.inventory.record import RecordEmitter, full_record_id
from faden_agent.workers.inventory.wire_form import wire_form

AGE_S = 300.0


def clone(value: dict) -> dict:
    return orjson.loads(orjson.dumps(value))


def machine(gpus: int = 4) -> dict:
    """A small machine's sections, in the shape the probes give."""
    return {
        "host": {"hostname": "n1", "kernel": "6.1", "usage": {"load_avg": [0.1, 0.2, 0.3], "memory_used": 5 << 30}},
        "disks": [
            {"paths": ["/"], "roles": ["root"], "total": 100 << 30, "low": False, "usage": {"free": 50 << 30}},
            {"paths": ["/models"], "roles": ["configured"], "error": "No such file or directory"},
        ],
        "network": [{"name": "eth0", "up": True, "mtu": 1500}],
        "docker": {"engine_version": "24", "images": [{"id": "sha256:a", "layers": ["l1", "l2"]}], "containers": []},
        "gpu": {
            "available": True,
            "devices": [
                {
                    "index": i,
                    "uuid": f"GPU-{i}",
                    "health": {"verdict": "ok", "reasons": [], "usage": {"pcie_gen": 5}},
                    "usage": {"utilization_gpu": 50, "power_draw_w": 300.0, "temperature_c": 40},
                }
                for i in range(gpus)
            ],
        },
        "probes": {"gpu": {"status": "ok", "usage": {"duration_ms": 2.0}}},
    }


def mutate(sections: dict, rng: random.Random, step: int) -> None:
    """One random change of a fact somewhere, sometimes with gauges moving."""
    choice = rng.randrange(9)
    docker, devices = sections["docker"], sections["gpu"]["devices"]
    if choice == 0 and len(docker["containers"]) < 12:
        docker["containers"].append({"name": f"c{step}", "state": "running", "gpus": None})
    elif choice in (0, 1) and docker["containers"]:
        docker["containers"].pop(rng.randrange(len(docker["containers"])))
    elif choice == 2 and docker["containers"]:
        rng.choice(docker["containers"])["state"] = rng.choice(["running", "exited", "restarting"])
    elif choice == 3:
        device = rng.choice(devices)
        device["health"]["verdict"] = rng.choice(["ok", "degraded", "failed"])
        device["health"]["reasons"] = [f"r{step}"] if device["health"]["verdict"] != "ok" else []
    elif choice == 4:
        sections["disks"][0]["low"] = not sections["disks"][0]["low"]
    elif choice == 5:
        sections["network"] = sections["network"][:1] + [{"name": f"br-{step}", "up": True}] * rng.randrange(2)
    elif choice == 6:
        if "error" in devices[-1]:
            devices[-1].pop("error")
        else:
            devices[-1]["error"] = "GPU is lost"
    elif choice == 7 and len(devices) > 3:  # a GPU leaves NVML's count: the ones after it move up
        devices.pop(1)
    elif choice == 7:
        device = {"index": 9, "uuid": f"GPU-{step}", "health": {"verdict": "ok", "reasons": []}}
        devices.insert(1, {**device, "usage": {"utilization_gpu": rng.randint(0, 100), "power_draw_w": 1.0}})
    else:
        docker["images"] = docker["images"][-4:] + [{"id": f"sha256:{step}", "layers": [f"l{step}"]}]
    for device in devices:
        if rng.random() < 0.5 and "usage" in device:
            device["usage"]["utilization_gpu"] = rng.randint(0, 100)
            device["usage"]["power_draw_w"] = float(rng.randint(100, 700))


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path)
    yield s
    s.close()


def deliver(store: Store, node_id: str, data: dict) -> None:
    store.store_records(node_id, [{"id": full_record_id(data), "kind": protocol.INVENTORY, "ts": 0.0, "data": data}])


def held(store: Store, node_id: str) -> dict:
    return store.inventory(node_id)["inventory"]


def test_a_thousand_random_changes_leave_the_backend_holding_what_a_full_record_says(store):
    node_id, _ = store.enroll(store.mint_token(), {"agent_id": "a"})
    rng = random.Random(41)
    sections = machine()
    emitter = RecordEmitter(full_refresh_s=10**9, usage_refresh_s=AGE_S)
    emitter.changes = True
    kinds: dict[str, int] = {}
    splices = 0
    for step in range(1001):
        if step:
            mutate(sections, rng, step)
        now = 1000.0 + 60 * step
        data = emitter.build(clone(sections), now=now)
        if data is None:
            continue
        kinds[data["type"]] = kinds.get(data["type"], 0) + 1
        splices += len(data.get("splice") or ())
        deliver(store, node_id, data)
        emitter.sent(data)
        view = held(store, node_id)
        truth = content(RecordEmitter().build(clone(sections), now=now))
        assert view["hash"] == content_hash(sections) and not store.inventory_behind
        assert without_usage(content(view)) == without_usage(truth), f"step {step}"
        assert_gauges_close(content(view), truth)
    assert kinds[FULL] == 1 and kinds[CHANGES] > 800 and splices > 100, (kinds, splices)


def assert_gauges_close(view: dict, truth: dict) -> None:
    """Every gauge the console sees is within its threshold of the truth (a changes record
    carries the whole part it replaces; the rest waits for its threshold or age)."""
    for device, real in zip(view["gpu"]["devices"], truth["gpu"]["devices"], strict=True):
        assert device.get("uuid") == real.get("uuid")
        for name, value in real.get("usage", {}).items():
            assert not gauge_rules.moved(name, device["usage"][name], value), (name, device["usage"][name], value)


def test_a_changes_record_carries_only_what_changed_and_a_receiver_that_fell_behind_asks(store):
    node_id, _ = store.enroll(store.mint_token(), {"agent_id": "a"})
    sections = machine(gpus=8)
    emitter = RecordEmitter(full_refresh_s=10**9, usage_refresh_s=AGE_S)
    emitter.changes = True
    containers = sections["docker"]["containers"]
    containers += [{"name": f"vllm-{n}", "state": "running", "labels": {"x": "y" * 300}} for n in range(20)]
    first = emitter.build(clone(sections), now=0.0)
    emitter.sent(first)
    containers.insert(1, {"name": "ray-head", "state": "running"})  # one container among 20: one item goes
    change = emitter.build(clone(sections), now=60.0)
    assert change["type"] == CHANGES and change["base"] == first["hash"] and change["hash"] == content_hash(sections)
    assert change["splice"] == [[["docker", "containers"], 1, 0, [{"name": "ray-head", "state": "running"}]]]
    assert "set" not in change and len(orjson.dumps(change)) < 300

    # This backend never got the full record: it cannot place the change, and asks.
    deliver(store, node_id, change)
    assert store.inventory(node_id)["inventory"] is None and node_id in store.inventory_behind
    deliver(store, node_id, first)
    assert node_id not in store.inventory_behind
    deliver(store, node_id, dict(change, collected_at=61.0))
    assert held(store, node_id)["docker"]["containers"] == containers

    # A change that does not hash to what it claims (a receiver holding something else) is refused.
    forged = dict(change, base=change["hash"], set=[[["host", "kernel"], "7.0"]], collected_at=62.0)
    assert receive(held(store, node_id), forged).behind


def test_gauges_go_when_they_moved_past_their_threshold_or_aged():
    sections = machine(gpus=2)
    emitter = RecordEmitter(full_refresh_s=10**9, usage_refresh_s=AGE_S)
    emitter.changes = True
    emitter.sent(emitter.build(clone(sections), now=0.0))
    devices = sections["gpu"]["devices"]
    devices[0]["usage"]["utilization_gpu"] = 55  # under the threshold of 10 points
    devices[1]["usage"]["temperature_c"] = 41
    assert emitter.build(clone(sections), now=60.0) is None
    devices[0]["usage"]["utilization_gpu"] = 61  # 11 points from the 50 sent
    devices[1]["usage"]["power_draw_w"] = 420.0
    moved = emitter.build(clone(sections), now=120.0)
    assert moved["type"] == UNCHANGED
    assert moved["usage"] == {
        "gpu": {"devices": [{"usage": {"utilization_gpu": 61}}, {"usage": {"power_draw_w": 420.0}}]}
    }
    emitter.sent(moved)
    aged = emitter.build(clone(sections), now=AGE_S + 1)
    assert emitter.build(clone(sections), now=AGE_S - 1) is None
    # every gauge not sent since the full record at 0 is due; the two sent at 120 are not
    assert aged["usage"]["gpu"]["devices"][0]["usage"] == {"power_draw_w": 300.0, "temperature_c": 40}
    assert aged["usage"]["host"]["usage"] == {"load_avg": [0.1, 0.2, 0.3], "memory_used": 5 << 30}


def test_a_backend_of_the_previous_version_gets_full_and_unchanged_records_with_every_gauge():
    sections = machine(gpus=2)
    emitter = RecordEmitter(full_refresh_s=10**9, usage_refresh_s=AGE_S)  # changes: not accepted
    emitter.sent(emitter.build(clone(sections), now=0.0))
    sections["docker"]["containers"].append({"name": "c", "state": "running"})
    change = emitter.build(clone(sections), now=60.0)
    assert change["type"] == FULL
    emitter.sent(change)
    sections["gpu"]["devices"][0]["usage"]["utilization_gpu"] = 99
    small = emitter.build(clone(sections), now=60.0 + AGE_S)
    assert small["type"] == UNCHANGED and small["usage"]["gpu"]["devices"][1]["usage"]["utilization_gpu"] == 50


def test_a_full_record_goes_when_the_backend_asks_and_what_it_accepts_comes_from_hello(tmp_path):
    assert backend_accepts.read(tmp_path).accepts == frozenset()  # no file: the previous protocol
    backend_accepts.heard_hello(tmp_path, [protocol.inventory.ACCEPTS_CHANGES, 7, "x" * 500])
    assert backend_accepts.read(tmp_path).accepts == {protocol.inventory.ACCEPTS_CHANGES}
    backend_accepts.full_requested(tmp_path, now=500.0)
    backend_accepts.heard_hello(tmp_path, None)  # a backend of the previous version
    assert backend_accepts.read(tmp_path) == backend_accepts.BackendAccepts(frozenset(), 500.0)
    (tmp_path / backend_accepts.FILE_NAME).write_bytes(b"\xff not json")
    assert backend_accepts.read(tmp_path) == backend_accepts.BackendAccepts()


def test_nvlink_links_go_as_one_list_per_field():
    links = [
        {"link": n, "active": n != 2, "errors": {"replay": 0, "recovery": 0, "crc_flit": n, "crc_data": 0}}
        for n in range(18)
    ]
    nvlink = {"links": links, "errors": {"replay": 0, "recovery": 0, "crc_flit": 153, "crc_data": 0}}
    sections = {"gpu": {"devices": [{"index": 0, "health": {"verdict": "ok", "nvlink": nvlink}}, {"index": 1}]}}
    compact = wire_form(sections)["gpu"]["devices"][0]["health"]["nvlink"]
    assert compact["links"] == 18 and compact["active"][2] is False and compact["active"].count(True) == 17
    assert compact["link_errors"]["crc_flit"] == list(range(18)) and compact["errors"] == nvlink["errors"]
    assert len(orjson.dumps(compact)) * 4 < len(orjson.dumps(nvlink))
    assert sections["gpu"]["devices"][0]["health"]["nvlink"] is nvlink  # the probe's own form is untouched


def test_the_docs_threshold_table_is_the_code_s():
    text = (Path(__file__).parents[3] / "docs" / "inventory.md").read_text()
    table = text.split("<!-- gauge thresholds: generated")[1].split("<!-- end gauge thresholds -->")[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|$", table, re.M))
    gib = gauge_rules.GiB
    assert rows == {k: f"{v / gib:g} GiB" if v >= gib else f"{v:g}" for k, v in gauge_rules.THRESHOLDS.items()}
