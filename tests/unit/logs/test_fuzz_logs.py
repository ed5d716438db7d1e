"""Property tests over what the log shipper parses: Loki's answers (on a real socket, directly
and through the backend) become the documented decision (accepted, final 400, retry after
a bounded wait, split on 413), and journalctl's JSON lines (binary fields as byte arrays,
missing fields, wrong types, huge MESSAGE) become a clean entry or a clean skip."""

from __future__ import annotations

import math
import threading

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faden_agent.backend.client import DEFAULT_MAINTENANCE_WAIT_S, BackendClient, parse_retry_after
from faden_agent.workers.logs.backlog import Backlog
from faden_agent.workers.logs.entry import MAX_LINE_BYTES, TRUNCATION_MARKER, Entry
from faden_agent.workers.logs.labels import LEVELS, LabelMaker
from faden_agent.workers.logs.loki.client import (
    AUTH_REFUSALS,
    LOKI_MAX_WAIT_S,
    RATE_LIMITED_MIN_S,
    Pusher,
    encode,
    names_single_lines,
)
from faden_agent.workers.logs.loki.destinations import DirectLoki, ThroughBackend
from faden_agent.workers.logs.positions import Positions
from faden_agent.workers.logs.sources import Shared
from faden_agent.workers.logs.sources.journald.source import JournaldSource
from faden_agent.workers.threads import start_daemon
from tests.support.fuzzvalues import FUZZ_CREDENTIAL, header_text, json_values, retry_afters

BACKOFF_MIN_S, BACKOFF_MAX_S = 1.0, 8.0  # a minimum apart from RATE_LIMITED_MIN_S


@pytest.fixture(scope="module")
def targets(scripted_http, scripted_config):
    direct = DirectLoki(scripted_http.url, scripted_config)
    through = ThroughBackend(BackendClient(scripted_config, FUZZ_CREDENTIAL), "/api/agent/v1/logs/push")
    yield {"direct": direct, "through": through}
    direct.close()
    through.close()


def entries(n: int, labels: LabelMaker) -> list[Entry]:
    return [
        Entry(
            labels.system("info"), 1_700_000_000_000_000_000 + i, f"line {i}", {"unit": "x.service"}, "journal", f"c{i}"
        )
        for i in range(n)
    ]


statuses = st.integers(200, 599) | st.sampled_from([200, 204, 400, 401, 403, 408, 413, 429, 500, 502, 503, 504])
bodies = header_text | st.sampled_from(
    [
        "",
        "structured metadata is not enabled",
        "entry too far behind",
        "entry for stream '{job=\"a\"}' has timestamp too old: 2024-01-01T00:00:00Z",
        "Max entry size '1024' bytes exceeded for stream '{}' while adding",
        "entry for stream '{}' has timestamp too old: 2024-01-01T00:00:00Z, oldest acceptable timestamp is: "
        "2024-01-02T00:00:00Z",
        "entry for stream '{}' has timestamp too old: x, oldest acceptable timestamp is: 99999-99-99T99:99:99Z",
        "entry for stream '{}' has timestamp too new: 1970-01-01T00:00:00Z",
        "entry with timestamp 2024 ignored, reason: 'entry out of order' for stream: {},\n"
        "total ignored: 99999999999999999999999 out of 1",
        "STRUCTURED METADATA disabled\nsecond line",
        "x" * 5000,
    ]
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    via=st.sampled_from(["direct", "through"]),
    status=statuses,
    body=bodies,
    retry_after=retry_afters,
    n=st.integers(1, 4),
)
def test_each_loki_answer_gets_its_decision(scripted_http, scripted_config, targets, via, status, body, retry_after, n):
    scripted_http.answer(
        status, body.encode("latin-1"), {"Retry-After": retry_after} if retry_after is not None else {}
    )
    waits: list[float] = []
    pusher = Pusher(targets[via], BACKOFF_MIN_S, BACKOFF_MAX_S, sleep=lambda s: waits.append(s) or True)
    batch = entries(n, LabelMaker(scripted_config))
    outcome = pusher.push(batch)
    pushes = len(scripted_http.requests)

    if 200 <= status < 300:
        assert (outcome.accepted, outcome.rejected, outcome.dropped, pushes) == (n, 0, 0, 1)
    elif status == 400:
        names_lines = names_single_lines(body[:300])
        # Every line counted once: those Loki's words condemn (at least one) as rejected, the
        # rest accepted; lines pushed alone and refused are each rejected.
        assert outcome.accepted + outcome.rejected == n and outcome.dropped == 0
        assert 1 <= outcome.rejected and (names_lines or outcome.rejected == n)
        # Naming lines: final, sent once. Refusing the whole push: once more in the plain
        # form, then split down to single lines (1 + 2n - 1 pushes), the form remembered.
        assert pushes == (1 if names_lines else 2 * n)
        assert pusher.with_metadata is names_lines
    elif status == 413:
        assert (outcome.accepted, outcome.rejected, outcome.dropped) == (0, 0, n)  # split down to single lines
        assert pushes == 2 * n - 1
    else:
        assert outcome is None and pushes == 1 and len(waits) == 1, (status, outcome, waits)
        wait = waits[0]
        assert math.isfinite(wait) and 0 <= wait <= LOKI_MAX_WAIT_S
        told = parse_retry_after(retry_after)
        if via == "through" and status == 503 and told is None:
            told = DEFAULT_MAINTENANCE_WAIT_S  # the backend client's maintenance default
        if via == "through" and status not in (408, 429) and status < 500:
            told = None  # the backend client reads Retry-After on 408, 429 and 5xx only
        if status in AUTH_REFUSALS:
            assert BACKOFF_MAX_S / 2 <= wait <= BACKOFF_MAX_S  # who we are was refused: asked rarely
        elif told is None and status == 429:
            assert RATE_LIMITED_MIN_S - 0.05 <= wait <= RATE_LIMITED_MIN_S  # a rate limit: not the reconnect backoff
        elif told is None:
            assert BACKOFF_MIN_S / 2 <= wait <= BACKOFF_MIN_S  # the first backoff step, jittered
        else:
            assert abs(wait - min(told, LOKI_MAX_WAIT_S)) < 1  # (an HTTP date moves with the clock)
        assert pusher.last_error and FUZZ_CREDENTIAL not in pusher.last_error


# --- journal lines

byte_arrays = st.lists(st.integers(-5, 300), max_size=20)  # journalctl writes binary data as byte values
field_values = (
    json_values
    | byte_arrays
    | st.lists(byte_arrays, max_size=3)
    | st.text(max_size=30)
    | st.sampled_from(["x" * (MAX_LINE_BYTES + 10), "é" * MAX_LINE_BYTES, "\U0001f600" * 20_000])
)
timestamps = (
    json_values
    | st.integers(-(2**63), 2**64 - 1).map(str)
    | st.sampled_from(["1700000000000000", "-1", "1e6", "", " 12 ", "9" * 5000, "0x10", True])
)
records = st.fixed_dictionaries(
    {},
    optional={
        "__CURSOR": st.text(max_size=20) | json_values,
        "__REALTIME_TIMESTAMP": timestamps,
        "MESSAGE": field_values,
        "PRIORITY": st.sampled_from(["0", "3", "7", "8", "-1", "", "03", 3, None, [51]]) | json_values,
        "_SYSTEMD_UNIT": field_values,
        "_PID": field_values,
        "_BOOT_ID": field_values,
        "SYSLOG_IDENTIFIER": field_values,
    },
)


@pytest.fixture(scope="module")
def journal(scripted_config, tmp_path_factory):
    return JournaldSource(
        Shared(
            scripted_config,
            Backlog(),
            Positions(tmp_path_factory.mktemp("positions")),
            LabelMaker(scripted_config),
            threading.Event(),
            start_daemon,
        )
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record=records | json_values)
def test_each_journal_line_is_an_entry_or_a_skip(journal, record):
    raw = orjson.dumps(record) + b"\n"
    entry = journal.to_entry(raw)
    if not isinstance(record, dict) or not isinstance(record.get("__CURSOR"), str):
        assert entry is None  # nothing to resume after: not a journal entry
        return
    assert entry is not None and entry.position == record["__CURSOR"]
    assert isinstance(entry.ts_ns, int) and 0 <= entry.ts_ns < 2**63  # Loki's nanosecond range
    assert dict(entry.stream)["level"] in LEVELS
    data = entry.line.encode("utf-8")  # valid UTF-8, or encode() below would fail too
    assert len(data) <= MAX_LINE_BYTES + len(TRUNCATION_MARKER.format(cut=10**12))
    assert all(isinstance(v, str) for v in (entry.metadata or {}).values())
    orjson.loads(encode([entry]))  # the push body is valid JSON


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=60))
def test_any_bytes_from_journalctl_are_skipped_or_parsed(journal, raw):
    entry = journal.to_entry(raw)
    assert entry is None or isinstance(entry.position, str)


def test_binary_message_is_decoded_and_repeated_fields_joined(journal):
    entry = journal.to_entry(
        orjson.dumps(
            {
                "__CURSOR": "s=1",
                "__REALTIME_TIMESTAMP": "1700000000000001",
                "MESSAGE": list(b"caf\xc3\xa9 \xff"),
                "PRIORITY": "3",
                "_PID": ["1", "2"],
            }
        )
    )
    assert entry.line == "café \ufffd" and entry.ts_ns == 1_700_000_000_000_001_000
    assert dict(entry.stream)["level"] == "error" and entry.metadata["pid"] == "1\n2"
