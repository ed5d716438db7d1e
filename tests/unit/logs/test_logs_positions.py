"""Durable log positions (workers/logs/positions.py): kept across a restart in a private file,
every save valid JSON, a corrupt file a fresh start, a slow save never holding the shipper's
counts."""

from __future__ import annotations

import threading

from faden_agent.config import load_config
from faden_agent.workers.logs.backlog import Backlog
from faden_agent.workers.logs.entry import Entry
from faden_agent.workers.logs.positions import Positions


def test_positions_survive_a_restart_and_the_file_is_private(tmp_path):
    positions = Positions(tmp_path)
    positions.advance({"journal": "s=1;i=2", "file:1:2": {"offset": 10, "ts": 5}})
    positions.save(force=True)
    assert (tmp_path / "logs-positions.json").stat().st_mode & 0o777 == 0o600
    again = Positions(tmp_path)
    assert again.get("journal") == "s=1;i=2" and again.get("file:1:2") == {"offset": 10, "ts": 5}
    again.initialize("journal", "other")  # a start position never moves a stored one
    assert Positions(tmp_path).get("journal") == "s=1;i=2"


def test_every_save_reaches_the_file_and_a_shorter_one_leaves_valid_json(tmp_path):
    positions = Positions(tmp_path)
    positions.advance({"journal": "s=1;i=" + "9" * 50, "container:a:stdout": 1})
    positions.save(force=True)  # the durable path: replace + fsync
    inode = (tmp_path / "logs-positions.json").stat().st_ino
    positions.forget("container:a:stdout")
    positions.advance({"journal": "s=1;i=3"})
    positions.save()  # the cheap path: one padded pwrite, no throttle, no new file
    assert (tmp_path / "logs-positions.json").stat().st_ino == inode
    assert (tmp_path / "logs-positions.json").read_bytes().endswith(b" ")
    again = Positions(tmp_path)
    assert again.get("journal") == "s=1;i=3" and again.get("container:a:stdout") is None


def test_corrupt_positions_start_over_instead_of_failing(tmp_path):
    (tmp_path / "logs-positions.json").write_text("{not json")
    assert Positions(tmp_path).get("journal") is None


def test_a_slow_positions_write_never_holds_the_shippers_counts(tmp_path, monkeypatch):
    """The worker's liveness message carries the shipper's counts: a save of the positions
    stuck in the file system (an fsync on a loaded disk) must not hold them."""
    from faden_agent.workers.logs import positions as positions_module
    from faden_agent.workers.logs.batcher import Batch
    from faden_agent.workers.logs.loki.client import Outcome
    from faden_agent.workers.logs.shipper import Shipper, _Pending

    config = load_config({"FADEN_NODE_AGENT_STATE_PATH": str(tmp_path / "state.json")})
    shipper = Shipper(config, Backlog(), Positions(tmp_path), threading.Event())
    writing, release = threading.Event(), threading.Event()

    real_replace_file = positions_module.replace_file

    def stuck_replace_file(*args, **kwargs):
        writing.set()
        release.wait(30)
        real_replace_file(*args, **kwargs)

    monkeypatch.setattr(positions_module, "replace_file", stuck_replace_file)
    entry = Entry((("job", "x"),), 1, "line", None, "journal", "s=1;i=1")
    pending = _Pending(Batch([entry]), done=True, outcome=Outcome(accepted=1, sources={"journald": [1, 0, 0]}))
    shipper._in_flight.append(pending)
    completing = threading.Thread(target=shipper._complete, daemon=True)
    completing.start()
    try:
        assert writing.wait(10), "the positions were never saved"
        counts: list[dict] = []
        reader = threading.Thread(target=lambda: counts.append(shipper.source_counts()), daemon=True)
        reader.start()
        reader.join(5)
        assert counts == [{"journald": {"lines_shipped": 1, "lines_refused": 0}}]  # answered mid-write
    finally:
        release.set()
        completing.join(10)
