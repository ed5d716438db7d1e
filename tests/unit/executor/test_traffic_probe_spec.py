"""traffic.probe / traffic.serve specs: defaults, hard caps, and hostile values
refused with one line naming the key (never quoting a ticket)."""

from __future__ import annotations

import pytest

from faden_agent.workers.executor.commands import KINDS, traffic
from faden_agent.workers.executor.specs import SpecError

TICKET = "t" * 32
PEER = {"machine": "node-2", "address": "http://198.18.0.12:7480", "ticket": TICKET}


def probe_spec(**changes):
    return KINDS["traffic.probe"].validate({"peers": [PEER], **changes})


def test_defaults_and_the_normalised_spec():
    spec = probe_spec()
    assert spec["peers"] == [PEER]
    assert spec["duration_s"] == traffic.DEFAULT_DURATION_S
    assert spec["max_bytes"] == traffic.DEFAULT_MAX_BYTES
    assert spec["round_trips"] == traffic.DEFAULT_ROUND_TRIPS
    assert probe_spec(duration_s=30, max_bytes=1, round_trips=1000)["duration_s"] == 30.0
    assert probe_spec(duration_s=None)["duration_s"] == traffic.DEFAULT_DURATION_S  # null: the default
    assert not KINDS["traffic.probe"].inline and KINDS["traffic.probe"].cancellable
    assert KINDS["traffic.serve"].inline  # registers tickets only: no Docker, no network


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("duration_s", 0),
        ("duration_s", -1),
        ("duration_s", 30.001),
        ("duration_s", 1e308),
        ("duration_s", float("inf")),
        ("duration_s", float("nan")),
        ("duration_s", "2"),
        ("duration_s", True),
        ("max_bytes", 0),
        ("max_bytes", -5),
        ("max_bytes", (1 << 30) + 1),
        ("max_bytes", 2**200),
        ("max_bytes", 1.5),
        ("max_bytes", "1g"),
        ("max_bytes", [1]),
        ("round_trips", 0),
        ("round_trips", 1001),
        ("round_trips", False),
        ("round_trips", {"n": 1}),
    ],
)
def test_hostile_bounds_are_refused_naming_the_key(key, value):
    with pytest.raises(SpecError) as refused:
        probe_spec(**{key: value})
    message = str(refused.value)
    assert key in message and "\n" not in message and len(message) < 400


@pytest.mark.parametrize(
    "peers",
    [
        [],
        [PEER] * 65,
        "node-2",
        None,
        {"machine": "node-2"},
        [None],
        [["node-2"]],
        [{**PEER, "extra": 1}],
        [{k: v for k, v in PEER.items() if k != "ticket"}],
        [{**PEER, "machine": ""}],
        [{**PEER, "machine": 7}],
        [{**PEER, "machine": "x" * 201}],
        [{**PEER, "machine": "a\nb"}],
        [{**PEER, "address": "198.18.0.12:7480"}],
        [{**PEER, "address": "ftp://198.18.0.12:7480"}],
        [{**PEER, "address": "http://198.18.0.12"}],
        [{**PEER, "address": "http://198.18.0.12:99999"}],
        [{**PEER, "address": 5}],
        [{**PEER, "ticket": "short"}],
        [{**PEER, "ticket": "x" * 513}],
        [{**PEER, "ticket": 12345678901234567890}],
        [PEER, PEER],  # the same machine twice
    ],
)
def test_hostile_peers_are_refused_without_quoting_a_ticket(peers):
    with pytest.raises(SpecError) as refused:
        KINDS["traffic.probe"].validate({"peers": peers})
    message = str(refused.value)
    assert "peers" in message and TICKET not in message and len(message) < 400


def test_unknown_keys_and_a_missing_peers_list_are_refused():
    with pytest.raises(SpecError, match="peers"):
        KINDS["traffic.probe"].validate({})
    with pytest.raises(SpecError, match="bandwidth"):
        probe_spec(bandwidth=1)


def test_serve_tickets():
    entry = {"ticket_sha256": "a" * 64, "receiver": "198.18.0.11"}
    spec = KINDS["traffic.serve"].validate({"tickets": [entry]})
    assert spec == {"tickets": [entry], "ttl_s": 300.0}
    for hostile in (
        {"tickets": []},
        {"tickets": [entry] * 65},
        {"tickets": [{**entry, "ticket_sha256": "A" * 64}]},
        {"tickets": [{**entry, "receiver": ""}]},
        {"tickets": [{"ticket_sha256": "a" * 64}]},
        {"tickets": [entry], "ttl_s": 3601},
        {"tickets": [entry], "ttl_s": -1},
        {"tickets": "a" * 64},
    ):
        with pytest.raises(SpecError):
            KINDS["traffic.serve"].validate(hostile)
