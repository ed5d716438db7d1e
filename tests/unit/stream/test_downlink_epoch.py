"""The downlink's cursor and the backend's epoch (docs/protocol.md, Epoch), on a real outbox."""

from __future__ import annotations

import logging
import threading

from faden_agent.backend.client import MaintenanceHold
from faden_agent.backend.outbox import Outbox
from faden_agent.config import load_config
from faden_agent.ipc import Endpoints
from faden_agent.node.linkstatus import LinkStatus
from faden_agent.node.membership import new_membership
from faden_agent.workers.stream.downlink import CURSOR_KEY, EPOCH_KEY, Downlink
from faden_agent.workers.stream.link import Gate, Link


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


def test_a_backend_behind_the_cursor_resets_it_like_a_new_epoch(tmp_path, caplog):
    downlink = make_downlink(tmp_path)
    downlink.outbox.set_meta(CURSOR_KEY, "13")
    downlink.cursor = 13
    assert downlink.backend_not_behind(None) and downlink.backend_not_behind(13) and downlink.backend_not_behind(40)
    assert downlink.backend_not_behind(True) and downlink.backend_not_behind(-1)  # no sequence numbers
    with caplog.at_level(logging.WARNING):
        assert downlink.backend_not_behind(10) is False
    assert downlink.cursor == 0 and make_downlink(tmp_path).cursor == 0  # durable
    assert downlink.link_status.snapshot()["epoch_resets"] == 1
    assert any("restored from an older copy" in r.getMessage() for r in caplog.records)


def test_a_command_at_or_below_the_cursor_is_handed_over_and_its_id_decides(tmp_path, caplog):
    downlink = make_downlink(tmp_path)
    downlink.cursor = 10
    seen = {"c-9"}  # what the executor's journal holds
    handed = []

    def hand_off(command):
        handed.append(command["id"])
        duplicate = command["id"] in seen
        seen.add(command["id"])
        return {"id": command["id"], "accepted": True, "duplicate": duplicate}

    downlink.hand_off = hand_off
    with caplog.at_level(logging.WARNING):
        downlink.deliver({"type": "command", "id": "c-9", "seq": 9, "kind": "container.start"})
        downlink.deliver({"type": "command", "id": "new-10", "seq": 10, "kind": "container.start"})
    assert handed == ["c-9", "new-10"] and downlink.cursor == 10
    snapshot = downlink.link_status.snapshot()
    assert snapshot["stale_commands"] == 1 and snapshot["below_cursor_run"] == 1
    assert sum("answered from the journal" in r.getMessage() for r in caplog.records) == 1
    assert sum("but a new id: run" in r.getMessage() for r in caplog.records) == 1
    downlink.deliver({"type": "command", "id": "c-11", "seq": 11, "kind": "container.start"})
    assert handed[-1] == "c-11" and downlink.cursor == 11
