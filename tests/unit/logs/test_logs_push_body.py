"""The push to Loki: its JSON and protobuf bodies (streams in order, metadata or the detail in the
line), gzip, the lines a 400 refuses, and whether the log target knows where to push."""

from __future__ import annotations

import gzip

import orjson

from faden_agent.config import load_config
from faden_agent.workers.logs.entry import Entry
from faden_agent.workers.logs.loki.client import encode, refused_count
from tests.support.logentries import entry


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


def test_gzip_level_round_trip_of_a_push():
    from faden_agent.workers.logs.loki.destinations import GZIP_LEVEL

    body = encode([entry(i) for i in range(100)])
    assert gzip.decompress(gzip.compress(body, GZIP_LEVEL)) == body


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
    """The hand-made protobuf PushRequest (loki/proto.py) through a strict decoder (Loki's wire rules): labels
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


def test_the_log_target_says_whether_it_knows_where_to_push(tmp_path):
    from faden_agent.workers.logs.loki.destinations import make_target

    asking = make_target(load_config({"FADEN_NODE_AGENT_STATE_PATH": str(tmp_path / "state.json")}))
    direct = make_target(load_config({"FADEN_NODE_AGENT_LOKI_URL": "http://127.0.0.1:9"}))
    assert (asking.resolved, direct.resolved) == (False, True)
