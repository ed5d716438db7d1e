"""The log shipper's pure parts: line rules, labels, journal fields, timestamps, the push
body, batching, the bounded backlog and durable positions."""

from __future__ import annotations

import gzip
import threading
import time

import orjson
import pytest

from faden_agent.config import load_config
from faden_agent.workers.logs.backlog import Backlog
from faden_agent.workers.logs.batcher import Batcher
from faden_agent.workers.logs.entry import MAX_LINE_BYTES, Entry, clean_line
from faden_agent.workers.logs.labels import LINE_LEVELS, LabelMaker, file_kind, level_from_priority
from faden_agent.workers.logs.loki.client import encode, refused_count
from faden_agent.workers.logs.positions import Positions
from faden_agent.workers.logs.sources import Shared
from faden_agent.workers.logs.sources.journald.source import field_text
from faden_agent.workers.logs.sources.managed import ManagedNames
from faden_agent.workers.logs.sources.ray.tail import parse_ray_ts_ns
from faden_agent.workers.logs.stamps import parse_rfc3339_ns
from faden_agent.workers.threads import start_daemon


def entry(i: int, stream=(("job", "x"),), size: int = 0) -> Entry:
    return Entry(stream, 1_000 + i, f"line {i}", None, "src", i, size)


def test_long_lines_are_cut_with_a_marker_at_a_character_boundary():
    line = clean_line(("é" * MAX_LINE_BYTES).encode())  # 2 bytes each: the cut falls inside one
    head, marker = line.split(" [faden-agent: truncated ")
    assert head == "é" * (MAX_LINE_BYTES // 2)
    assert marker == f"{MAX_LINE_BYTES} bytes]"
    assert clean_line("short") == "short"


def test_invalid_utf8_is_replaced_not_fatal():
    assert clean_line(b"ok \xff\xfe end") == "ok \ufffd\ufffd end"


@pytest.mark.parametrize(
    "priority,level",
    [
        ("0", "emerg"),
        ("1", "alert"),
        ("2", "crit"),
        ("3", "error"),
        ("4", "warning"),
        ("5", "notice"),
        ("6", "info"),
        ("7", "debug"),
        (None, "info"),
        ("9", "info"),
        ("x", "info"),
        ([1], "info"),
    ],
)
def test_levels_from_journald_priority(priority, level):
    assert level_from_priority(priority) == level


def test_system_labels_are_exactly_the_documented_five(tmp_path):
    config = load_config({}, agent_id="gpu-7", advertise_host="10.1.2.3", state_path=tmp_path / "s.json")
    labels = dict(LabelMaker(config).system("warning"))
    assert labels == {
        "job": "node-agent",
        "host": "10.1.2.3",
        "agent_id": "gpu-7",
        "container": "node-gpu-7",
        "level": "warning",
    }


def test_container_and_ray_labels_name_the_container_and_stay_low_cardinality(tmp_path):
    maker = LabelMaker(load_config({}, agent_id="a", advertise_host="h", state_path=tmp_path / "s.json"))
    by_level = maker.container("ray-head", "c1", None, "stderr")
    assert set(by_level) == set(LINE_LEVELS)
    assert dict(by_level["error"]) == {
        "job": "node-agent",
        "host": "h",
        "agent_id": "a",
        "container": "ray-head",
        "cluster": "c1",
        "source": "container",
        "stream": "stderr",
        "level": "error",
    }
    assert dict(maker.ray_file("ray-head", "replica_app_Model_x1y2.log")["info"])["file"] == "replica"
    assert file_kind("controller_1234.log") == "controller"
    assert file_kind("_odd.log") == "other"
    core = {
        name: dict(maker.ray_file("ray-head", name, core=True)["unknown"])["file"]
        for name in [
            "raylet.out",
            "gcs_server.err",
            "python-core-worker-01ab_412.log",
            "worker-01ab-01000000-412.out",
            "monitor.log",
            "dashboard.log",
            "dashboard_agent.log",
            "anything-a-container-names.log",
        ]
    }
    assert core == {
        "raylet.out": "raylet",
        "gcs_server.err": "gcs_server",
        "python-core-worker-01ab_412.log": "core_worker",
        "worker-01ab-01000000-412.out": "worker",
        "monitor.log": "monitor",
        "dashboard.log": "dashboard",
        "dashboard_agent.log": "dashboard_agent",
        "anything-a-container-names.log": "other",
    }
    assert dict(maker.ray_file("ray-head", "raylet.out", core=True)["info"])["source"] == "ray"


def test_journal_field_values_text_binary_repeated_missing():
    assert field_text("plain") == "plain"
    assert field_text([104, 105, 255]) == "hi\ufffd"  # binary: an array of byte values
    assert field_text(["one", [116, 119, 111]]) == "one\ntwo"  # a field that occurs twice
    assert field_text(None) == ""


def test_docker_and_ray_timestamps():
    assert parse_rfc3339_ns(b"2024-01-02T03:04:05.123456789Z") == 1704164645_123456789
    assert parse_rfc3339_ns(b"2024-01-02T03:04:05.1Z") == 1704164645_100000000  # trailing zeros trimmed
    assert parse_rfc3339_ns(b"2024-01-02T03:04:05Z") == 1704164645_000000000
    assert parse_rfc3339_ns(b"2024-01-02T04:04:05+01:00") == 1704164645_000000000
    assert parse_rfc3339_ns(b"garbage") is None
    assert parse_ray_ts_ns(b"INFO 2024-01-02 03:04:05,250 controller 12 -- up") == 1704164645_250000000
    assert parse_ray_ts_ns(b'  File "x.py", line 3') is None
    # Stamps a nanosecond count cannot hold are no stamp (the line takes the previous one's)
    assert parse_ray_ts_ns(b"INFO 1900-01-01 00:00:00,000 x") is None
    assert parse_ray_ts_ns(b"INFO 9999-12-31 23:59:59,999 x") is None


@pytest.mark.parametrize(
    "stamp",
    [
        b"2024-01-02T03:04:05Z",
        b"2024-01-02T03:04:05.5Z",
        b"2024-01-02T03:04:05.000000001Z",
        b"2024-01-02T03:04:05.1234567890Z",  # ten digits: not RFC 3339 as Docker writes it
        b"2024-01-02T03:04:05.Z",
        b"2024-01-02T03:04:05.12a4Z",
        b"2024-01-02T03:04:05.1_2Z",  # int() would take it
        b"2024-01-02T03:04:05. 12Z",
        b"2024-01-02T03:04:05,5Z",
        b"2024-01-02T03:04:05.5+00:00",
        b"2024-01-02T03:04:06.5Z",
    ],
)
def test_the_same_second_fast_path_answers_as_the_full_parse(stamp):
    """After a stamp of the same second primed the fast path, each stamp parses as it does
    cold (the fast path only skips datetime for Docker's own UTC form)."""
    parse_rfc3339_ns(b"1999-01-01T00:00:00Z")  # another second primed: the full parse
    cold = parse_rfc3339_ns(stamp)
    parse_rfc3339_ns(b"2024-01-02T03:04:05.9Z")  # prime 03:04:05
    assert parse_rfc3339_ns(stamp) == cold


def test_push_body_groups_streams_in_order_with_ns_strings_and_metadata():
    a, b = (("job", "a"),), (("job", "b"),)
    entries = [
        Entry(a, 5, "a1", {"unit": "u"}, "s", 1),
        Entry(b, 6, "b1", None, "s", 2),
        Entry(a, 7, "a2", None, "s", 3),
    ]
    body = orjson.loads(encode(entries))
    assert body == {
        "streams": [
            {"stream": {"job": "a"}, "values": [["5", "a1", {"unit": "u"}], ["7", "a2"]]},
            {"stream": {"job": "b"}, "values": [["6", "b1"]]},
        ]
    }
    # Without metadata the detail stays in the line (docs/logs.md): after a tab, logfmt.
    assert orjson.loads(encode(entries, with_metadata=False))["streams"][0]["values"][0] == ["5", "a1\tunit=u"]


def test_batches_are_capped_by_lines_and_bytes_and_a_backlog_drains_at_once():
    backlog = Backlog()
    for i in range(25):
        backlog.put(entry(i))
    batcher = Batcher(backlog, max_lines=10, flush_interval_s=30)
    started = time.monotonic()
    sizes = [len(batcher.collect()) for _ in range(2)]
    assert sizes == [10, 10] and time.monotonic() - started < 5  # full batches never wait
    by_bytes = Batcher(backlog, max_lines=100, flush_interval_s=0.2, max_bytes=1000)
    for i in range(5):
        backlog.put(entry(100 + i, size=400))
    first = by_bytes.collect()
    # 5 small (71 bytes each) + 2 of 400 reach the 1000-byte cap; order is kept.
    assert [e.line for e in first.entries] == [f"line {i}" for i in (20, 21, 22, 23, 24, 100, 101)]
    assert [e.line for e in by_bytes.collect().entries] == ["line 102", "line 103", "line 104"]


def test_a_partial_batch_waits_at_most_the_flush_interval():
    backlog = Backlog()
    backlog.put(entry(1))
    started = time.monotonic()
    batch = Batcher(backlog, max_lines=100, flush_interval_s=0.3).collect()
    assert len(batch) == 1 and 0.25 <= time.monotonic() - started < 3


def test_the_backlog_blocks_readers_when_full_and_releases_them_when_drained():
    backlog = Backlog(max_lines=3)
    for i in range(3):
        backlog.put(entry(i))
    done = threading.Event()
    threading.Thread(target=lambda: (backlog.put(entry(9)), done.set()), daemon=True).start()
    assert not done.wait(0.3) and len(backlog) == 3  # the reader waits: memory stays bounded
    assert len(backlog.take(1, 10**6, 0, 0)) == 1
    assert done.wait(5) and backlog.blocked_puts == 1
    backlog.close()
    assert backlog.put(entry(10)) is False


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


def test_gzip_level_round_trip_of_a_push():
    from faden_agent.workers.logs.loki.destinations import GZIP_LEVEL

    body = encode([entry(i) for i in range(100)])
    assert gzip.decompress(gzip.compress(body, GZIP_LEVEL)) == body


class RecordedLog:
    """A stand-in for a docker SDK container whose log is a fixed list of chunks: Docker
    stamps lines itself, so identical nanosecond stamps cannot be provoked on a real engine."""

    name, labels = "recorded", {}
    attrs = {"State": {"Status": "exited"}}  # its run ended: the read past the follow reads it again

    def __init__(self, chunks: list[bytes]):
        self.chunks = chunks

    def reload(self) -> None:
        pass

    def logs(self, **_: object):
        return iter(self.chunks)


def test_container_lines_sharing_a_nanosecond_stamp_are_all_shipped(tmp_path):
    from faden_agent.workers.logs.sources.containers.source import ContainerFollower, ContainersSource

    config = load_config({"FADEN_NODE_AGENT_STATE_PATH": str(tmp_path / "state.json")})
    backlog = Backlog()
    source = ContainersSource(
        Shared(config, backlog, Positions(tmp_path), LabelMaker(config), threading.Event(), start_daemon),
        ManagedNames(),
    )
    stamp = b"2026-11-29T23:00:00.000000005Z "
    follower = ContainerFollower(
        source,
        RecordedLog([stamp + b"first\n" + stamp + b"second\n", b"2026-11-29T23:00:00.000000009Z third\n"]),
        "stdout",
        "c:x",
    )
    source.read_upto["c:x"] = parse_rfc3339_ns(b"2026-11-29T23:00:00.000000001Z")  # resume point before them
    assert follower.read_until_stopped()
    assert [e.line for e in backlog.take(10, 1 << 20, 0, 0.01)] == ["first", "second", "third"]
    # a second follow from where the first stopped does not read them again
    follower.container = RecordedLog(
        [stamp + b"first\n" + stamp + b"second\n", b"2026-11-29T23:00:00.000000009Z third\n"]
    )
    assert follower.read_until_stopped()
    assert backlog.take(10, 1 << 20, 0, 0.01) == []


def test_a_per_line_refusal_counts_the_lines_lokis_words_condemn():
    """Loki's 400 about single lines names one bad line (or the number it ignored) and stores
    the rest; before, the whole batch was counted as rejected."""
    second = 1_800_000_000 * 10**9
    labels = (("job", "a"),)
    batch = [
        Entry(labels, second + offset, line, None, "journal", i)
        for i, (offset, line) in enumerate(
            [(-7200 * 10**9, "old"), (-3600 * 10**9, "older than the limit"), (0, "now"), (5 * 10**9, "x" * 300)]
        )
    ]
    oldest = "oldest acceptable timestamp is: 2027-01-15T07:30:00Z"  # 30 min before `second`
    assert (
        refused_count(f"entry for stream '{{job=\"a\"}}' has timestamp too old: 2027-01-15T06:00:00Z, {oldest}", batch)
        == 2
    )
    assert refused_count("entry for stream '{}' has timestamp too new: 2027-01-15T08:00:05Z", batch) == 1
    assert refused_count("Max entry size '256' bytes exceeded for stream '{}' while adding", batch) == 1
    assert (
        refused_count(
            "entry with timestamp x ignored, reason: 'entry out of order' ...\ntotal ignored: 3 out of 4", batch
        )
        == 3
    )
    # No measure in the words, or one that condemns none: the whole batch, at least one line.
    assert refused_count("entry for stream '{}' has timestamp too old: 2027-01-15T06:00:00Z", batch) == 4
    assert refused_count("Max entry size '100000' bytes exceeded", batch) == 1
    assert refused_count("oldest acceptable timestamp is: 2027-99-99T99:99:99Z", batch) == 4
    # Numbers no Loki writes (5000 digits: int() refuses over 4300) are no measure, not a crash.
    assert refused_count("Max entry size '" + "9" * 5000 + "' bytes exceeded", batch) == 4
    assert refused_count("total ignored: " + "9" * 5000 + " out of 4", batch) == 4


def test_the_protobuf_body_decodes_to_every_entry_as_loki_reads_it():
    """lokiproto's hand-made PushRequest through a strict decoder (Loki's wire rules): labels
    with quotes, backslashes and newlines, timestamps from 0 to past 2**62 ns, lines with
    multi-byte characters and NULs, metadata or the detail in the line."""
    from faden_agent.workers.logs.loki.proto import ProtoEncoder
    from tests.support.lokiprotodecode import decode_push

    labels = (("agent_id", 'we"ird\\x\n\t\x00\r'), ("job", "node-agent"))
    detail = {"unit": "u é", "pid": "1"}
    batch = [
        Entry(labels, 1_700_000_000_000_000_123 + i, f"l{i} é \x00" + "x" * (i * 50), detail if i % 2 else None, "j", i)
        for i in range(300)
    ]
    batch += [Entry(labels, 0, "zero", None, "j", 0), Entry(labels, 2**62 + 7, "late", detail, "j", 0)]
    for with_metadata in (True, False):
        body = ProtoEncoder().encode([batch], with_metadata)
        (stream,) = decode_push(body, 1 << 30, keep_metadata=True)["streams"]
        assert stream["stream"] == dict(labels)
        wanted = [
            [str(e.ts_ns), e.line, e.metadata] if e.metadata and with_metadata else [str(e.ts_ns), e.with_detail()]
            for e in batch
        ]
        assert stream["values"] == wanted


def test_seqnum_gaps_count_only_jumps_within_one_lineage():
    from faden_agent.workers.logs.sources.journald.seqnums import SeqnumGaps

    def cursors(lineage: str, *numbers: int) -> list[Entry]:
        return [Entry((), 1, "x", None, "journal", f"s={lineage};i={n:x};b=0;m=1;t=2;x=3") for n in numbers]

    gaps = SeqnumGaps("s=aa;i=9;b=0;m=1;t=2;x=3")  # the stored cursor: entry 9 was read
    assert gaps.gap(cursors("aa", 10, 11, 12)) == 0
    assert gaps.gap(cursors("aa", 20, 21)) == 7  # 13..19 gone before they were read
    assert gaps.gap(cursors("bb", 1, 2) + cursors("aa", 22) + cursors("bb", 5)) == 2  # interleaved lineages
    assert gaps.gap(cursors("aa", 23) + [Entry((), 1, "x", None, "journal", "not a cursor")]) == 0
    assert SeqnumGaps(None).gap(cursors("cc", 100, 101)) == 0  # no earlier read: nothing to compare


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


def test_the_log_target_says_whether_it_knows_where_to_push(tmp_path):
    from faden_agent.workers.logs.loki.destinations import make_target

    asking = make_target(load_config({"FADEN_NODE_AGENT_STATE_PATH": str(tmp_path / "state.json")}))
    direct = make_target(load_config({"FADEN_NODE_AGENT_LOKI_URL": "http://127.0.0.1:9"}))
    assert (asking.resolved, direct.resolved) == (False, True)
