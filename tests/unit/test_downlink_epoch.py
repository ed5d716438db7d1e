"""The downlink's cursor and the backend's epoch (docs/protocol.md, Epoch), on a real outbox."""

from __future__ import annotations

import logging
import threading

from faden_agent.backend import MaintenanceHold
from faden_agent.config import load_config
from faden_agent.ipc import Endpoints
from faden_agent.membership import new_membership
from faden_agent.reports.outbox import Outbox
from faden_agent.workers.stream.downlink import CURSOR_KEY, EPOCH_KEY, Downlink
from faden_agent.workers.stream.link import Gate, Link, LinkStatus


def make_downlink(tmp_path) -> Downlink:
    config = load_config(
        {
            "FADEN_NODE_AGENT_STATE_PATH": str(tmp_path / "state" / "state.json"),
            "FADEN_NODE_AGENT_RUNTIME_DIR": str(tmp_path / "run"),
        }
    )
    stop = threading.Event()
    outbox = Outbox(tmp_path / "state")
    link = Link(
        config,
        new_membership("http://b", "node-1", "cred", "a"),
        outbox,
        LinkStatus("http://b", None),
        Gate(stop, MaintenanceHold(tmp_path)),
        stop,
        Endpoints(tmp_path / "run"),
    )
    return Downlink(link)


def test_a_new_epoch_resets_the_durable_cursor(tmp_path):
    downlink = make_downlink(tmp_path)
    assert downlink.same_epoch("e1")  # the first epoch seen is adopted: the cursor stands
    downlink.outbox.set_meta(CURSOR_KEY, "41")
    downlink.cursor = 41
    assert downlink.same_epoch("e1") and downlink.same_epoch(None)  # same, or a backend without epochs
    assert downlink.same_epoch("e2") is False
    assert (downlink.cursor, downlink.epoch) == (0, "e2")
    again = make_downlink(tmp_path)  # what the next start reads
    assert (again.cursor, again.epoch) == (0, "e2")
    assert downlink.outbox.get_meta(EPOCH_KEY) == "e2"
    assert downlink.link_status.snapshot()["epoch_resets"] == 1


def test_a_command_at_or_below_the_cursor_is_logged_and_counted_never_run(tmp_path, caplog):
    downlink = make_downlink(tmp_path)
    downlink.cursor = 10
    handed = []
    downlink.hand_off = lambda command: handed.append(command) or True
    with caplog.at_level(logging.WARNING):
        for seq in (9, 10):
            downlink.deliver({"type": "command", "id": f"c-{seq}", "seq": seq, "kind": "container.start"})
    assert handed == [] and downlink.cursor == 10
    assert downlink.link_status.snapshot()["stale_commands"] == 2
    assert sum("at or below the cursor" in r.getMessage() for r in caplog.records) == 2
    downlink.deliver({"type": "command", "id": "c-11", "seq": 11, "kind": "container.start"})
    assert [c["id"] for c in handed] == ["c-11"] and downlink.cursor == 11
