"""journalctl's export format, parsed a block at a time (sources/journald/export.py), against
what the real journalctl writes for real journal files: every entry the JSON reader would
make, however the pipe cuts the stream, binary and repeated fields included."""

from __future__ import annotations

import random
import subprocess
import threading

import orjson
import pytest

from faden_agent.config import load_config
from faden_agent.workers.logs.backlog import Backlog
from faden_agent.workers.logs.labels import LabelMaker
from faden_agent.workers.logs.positions import Positions
from faden_agent.workers.logs.sources import Shared
from faden_agent.workers.logs.sources.journald.export import ExportParser
from faden_agent.workers.logs.sources.journald.source import OUTPUT_FIELDS, JournaldSource
from faden_agent.workers.threads import start_daemon
from tests.support.journalfiles import JOURNAL_REMOTE, JournalWriter

pytestmark = pytest.mark.skipif(not __import__("os").path.exists(JOURNAL_REMOTE), reason="no systemd-journal-remote")


def journalctl(directory, output: str) -> bytes:
    argv = ["journalctl", f"--directory={directory}", f"--output={output}", "--all", "--no-pager"]
    return subprocess.run(argv, capture_output=True, check=True).stdout


@pytest.fixture(scope="module")
def journal(tmp_path_factory):
    """Entries whose export form is awkward: binary values (newlines, empty lines, bytes that
    are not UTF-8, control characters), '=' in values, a field written twice."""
    writer = JournalWriter(tmp_path_factory.mktemp("journal"))
    rnd = random.Random(13)
    entries = []
    for i in range(1500):
        kind = i % 5
        if kind == 0:
            message: str | bytes = bytes(rnd.randrange(256) for _ in range(rnd.randrange(40)))
        elif kind == 1:
            message = "two\n\nparagraphs\n" + "k=v " * rnd.randrange(4)
        elif kind == 2:
            message = b"\n" * rnd.randrange(1, 12)
        else:
            message = f"plain {i} a=b \u00fc"
        extra = {"SYSLOG_IDENTIFIER": "ctl\x01char"} if i % 7 == 0 else {"SYSLOG_IDENTIFIER": "id"}
        entries.append(writer.entry(message, rnd.randrange(8), _PID=str(i), **extra))
    writer.append(entries)
    return writer


def make_source(tmp_path, **settings) -> JournaldSource:
    config = load_config({}, loki_url="http://127.0.0.1:9", state_path=tmp_path / "state.json", **settings)
    return JournaldSource(
        Shared(config, Backlog(), Positions(tmp_path), LabelMaker(config), threading.Event(), start_daemon)
    )


@pytest.fixture
def source(tmp_path):
    return make_source(tmp_path)


@pytest.mark.parametrize("piece", [1, 7, 100, 4096, 1 << 20])
def test_every_entry_is_the_one_the_json_reader_makes_however_the_pipe_cuts(journal, source, piece):
    exported = journalctl(journal.directory, "export")
    as_json = [source.to_entry(line) for line in journalctl(journal.directory, "json").splitlines()]
    parser = ExportParser()
    records = []
    for start in range(0, len(exported), piece):
        records += parser.feed(exported[start : start + piece])
    assert parser.pending == b""
    got = [source.export_entry(record) for record in records]
    assert len(got) == len(as_json) == 1500
    for mine, theirs in zip(got, as_json, strict=True):
        assert (mine.stream, mine.ts_ns, mine.line, mine.metadata, mine.position) == (
            theirs.stream,
            theirs.ts_ns,
            theirs.line,
            theirs.metadata,
            theirs.position,
        )


def test_a_field_written_twice_keeps_both_values_as_the_json_reader_does(source):
    exported = b"__CURSOR=s=1\n__REALTIME_TIMESTAMP=1700000000000001\n_PID=1\nMESSAGE=m\n_PID=2\nPRIORITY=3\n\n"
    (record,) = ExportParser().feed(exported)
    entry = source.export_entry(record)
    theirs = source.to_entry(
        orjson.dumps(
            {
                "__CURSOR": "s=1",
                "__REALTIME_TIMESTAMP": "1700000000000001",
                "_PID": ["1", "2"],
                "MESSAGE": "m",
                "PRIORITY": "3",
            }
        )
    )
    assert entry.metadata == theirs.metadata == {"pid": "1\n2"}
    assert (entry.line, entry.ts_ns, dict(entry.stream)["level"]) == ("m", 1_700_000_000_000_001_000, "error")


def test_an_entry_is_held_until_its_empty_line_and_one_without_a_cursor_is_skipped(source):
    parser = ExportParser()
    assert parser.feed(b"__CURSOR=s=9\nMESSAGE=half") == []
    assert parser.feed(b"\nMESSAGE\n" + (3).to_bytes(8, "little") + b"a\nb") == []  # binary, still open
    first, second = parser.feed(b"\n\nMESSAGE=no cursor\n\n")
    assert first[b"MESSAGE"] == b"half\na\nb"  # the field twice: both values
    assert source.export_entry(first).position == "s=9"
    assert source.export_entry(second) is None


def test_the_usual_entry_is_cut_by_one_match_and_its_labels_follow_the_fields_around_message(source):
    """journalctl's own layout (cursor, timestamps, fields, MESSAGE, fields) takes the shaped
    way: a field written twice keeps both values, each PRIORITY its own level, and an entry
    the match cannot take whole (a binary MESSAGE) between them goes the careful way."""
    head = b"__CURSOR=s=%d\n__REALTIME_TIMESTAMP=1700000000000001\n__MONOTONIC_TIMESTAMP=5\n_BOOT_ID=b\n"
    exported = (
        head % 1
        + b"_PID=1\nMESSAGE=one a=b\n_PID=2\nPRIORITY=3\n\n"
        + head % 2
        + b"PRIORITY=6\nMESSAGE\n"
        + (3).to_bytes(8, "little")
        + b"x\ny\n_PID=7\n\n"
        + head % 3
        + b"PRIORITY=7\n_PID=7\nMESSAGE=three\n\n"
    )
    records = ExportParser().feed(exported)
    assert [type(record) for record in records] == [tuple, dict, tuple]
    entries = [source.export_entry(record) for record in records]
    assert [(e.line, e.position, e.metadata, dict(e.stream)["level"]) for e in entries] == [
        ("one a=b", "s=1", {"pid": "1\n2", "boot_id": "b"}, "error"),
        ("x\ny", "s=2", {"pid": "7", "boot_id": "b"}, "info"),
        ("three", "s=3", {"pid": "7", "boot_id": "b"}, "debug"),
    ]


@pytest.mark.parametrize("stored", [5, ["s=1;i=2"], {"s": 1}, None])
def test_a_stored_cursor_of_another_type_starts_without_one(tmp_path, stored):
    """A hand-edited or damaged positions file: the source starts (no cursor), never fails."""
    positions = Positions(tmp_path)
    positions.advance({"journal": stored})
    positions.save(force=True)
    config = load_config({}, loki_url="http://127.0.0.1:9", state_path=tmp_path / "state.json")
    source = JournaldSource(
        Shared(config, Backlog(), Positions(tmp_path), LabelMaker(config), threading.Event(), start_daemon)
    )
    assert source.cursor is None


@pytest.mark.parametrize("output", ["export", "json"])
def test_the_boot_id_reaches_every_entry_though_the_source_does_not_ask_for_it(journal, tmp_path, output):
    """journalctl writes _BOOT_ID into each entry's head whatever --output-fields names, and
    each name it is given costs it CPU on every entry: the source's own command lines (the
    export reader's and the JSON one's for an oversize entry) leave it out and still get it."""
    assert "_BOOT_ID" not in OUTPUT_FIELDS.split(",")
    source = make_source(tmp_path, journal_directory=journal.directory)
    out = subprocess.run(source.argv(output, follow=False), capture_output=True, check=True).stdout
    if output == "json":
        entries = [source.to_entry(line) for line in out.splitlines()]
    else:
        entries = [source.export_entry(record) for record in ExportParser().feed(out)]
    assert len(entries) == 1500
    assert {entry.metadata["boot_id"] for entry in entries if entry is not None} == {journal.boot_id}
