"""The log worker's captures source (sources/captures.py): a capture left by the inventory is
one entry with its container's labels and source="capture", queued once however often the
tick looks; removed only after its position says Loki took it; a capture file that is not
one (garbage, a symlink) is removed and counted lost, and the next one still ships."""

from __future__ import annotations

import threading

import orjson

from faden_agent.config import load_config
from faden_agent.node import captures
from faden_agent.workers.logs.backlog import Backlog
from faden_agent.workers.logs.labels import LabelMaker
from faden_agent.workers.logs.positions import Positions
from faden_agent.workers.logs.sources import Shared
from faden_agent.workers.logs.sources.captures import SHIPPED, CapturesSource
from faden_agent.workers.threads import start_daemon


def source(tmp_path) -> CapturesSource:
    config = load_config(
        {
            "FADEN_NODE_AGENT_STATE_PATH": str(tmp_path / "state" / "state.json"),
            "FADEN_NODE_AGENT_AGENT_ID": "n1",
            "FADEN_NODE_AGENT_ADVERTISE_HOST": "10.0.0.1",
        }
    )
    positions = Positions(config.state_dir)
    shared = Shared(config, Backlog(), positions, LabelMaker(config), threading.Event(), start_daemon)
    return CapturesSource(shared)


def capture(capture_id: str, name: str = "engine") -> bytes:
    body = {"capture_id": capture_id, "time": 1700000000.5, "container": {"name": name, "cluster": "c1"}}
    return orjson.dumps(body)


def test_a_capture_ships_once_and_goes_once_loki_took_it(tmp_path):
    captures_source = source(tmp_path)
    state = captures_source.state_dir
    first = captures.capture_id("wl:1")
    captures.keep(state, first, capture(first))
    captures_source.check()
    assert captures_source.wake.is_set()
    captures_source.ship_waiting()
    captures_source.ship_waiting()  # looked at again before Loki answered: not queued twice
    (entry,) = captures_source.backlog.take(10, 1 << 20, 0, 0.01)
    assert dict(entry.stream) == {
        "job": "node-agent",
        "host": "10.0.0.1",
        "agent_id": "n1",
        "container": "engine",
        "cluster": "c1",
        "source": "capture",
        "level": "warning",
    }
    assert entry.ts_ns == 1700000000500000000 and orjson.loads(entry.line)["capture_id"] == first
    assert entry.source == f"capture:{first}" and entry.position == SHIPPED
    assert captures.waiting(state) == [first]  # not taken by Loki yet: kept
    captures_source.positions.advance({entry.source: entry.position})  # the shipper, once Loki took it
    captures_source.ship_waiting()
    assert captures.waiting(state) == [] and captures_source.positions.get(entry.source) is None
    assert captures_source.status()["shipped"] == 1 and captures_source.lines_read == 1


def test_a_capture_file_that_is_not_one_is_removed_and_counted_lost(tmp_path):
    captures_source = source(tmp_path)
    state = captures_source.state_dir
    bad, linked, good = (captures.capture_id(f"wl:{n}") for n in range(3))
    captures.keep(state, bad, b"{not json")
    (captures.directory(state) / f"{linked}.json").symlink_to(tmp_path / "elsewhere")
    captures.keep(state, good, capture(good))
    captures_source.ship_waiting()
    (entry,) = captures_source.backlog.take(10, 1 << 20, 0, 0.01)
    assert orjson.loads(entry.line)["capture_id"] == good
    assert captures.waiting(state) == [good] and captures_source.lines_lost == 2
