"""The probe matrix in the reference backend: the latest traffic.probe entry per
pair from the commands' timeline records, each direction's newest measurement in the admin
view (a probe measures both), reasons shown, old agents named; and the probe rounds'
schedule (every pair once, no machine twice in a round)."""

from __future__ import annotations

from pathlib import Path

import pytest

from faden_agent import protocol
from faden_agent.devbackend.probes import rounds
from faden_agent.devbackend.store import Store
from faden_agent.devbackend.traffic_view import render


@pytest.mark.parametrize("count", range(1, 10))
def test_rounds_probe_every_pair_once_and_no_machine_twice_at_a_time(count):
    machines = [f"n{i}" for i in range(count)]
    schedule = rounds(machines)
    pairs = [frozenset(pair) for batch in schedule for pair in batch]
    assert len(pairs) == len(set(pairs)) == count * (count - 1) // 2
    assert len(schedule) == (count - 1 if count % 2 == 0 else count) - (count == 1)
    for batch in schedule:
        busy = [m for pair in batch for m in pair]
        assert len(busy) == len(set(busy))


def finished_probe(store: Store, prober: str, state: str, entries: list[dict], n: int) -> None:
    command = store.add_command(prober, "traffic.probe", {"peers": []}, f"probe-{n}", None)
    data = {"command_id": command["id"], "state": state, "reason": "ok", "message": "m", "result": {"peers": entries}}
    store.store_records(prober, [{"id": f"tl:{n}", "kind": protocol.TIMELINE, "ts": float(n), "data": data}])


def test_latest_entry_per_pair_and_each_direction_from_either_probe(tmp_path: Path):
    store = Store(tmp_path)
    ids = []
    for i in (1, 2, 3):
        capabilities = [protocol.TRAFFIC_CAPABILITY] + ([protocol.PROBE_CAPABILITY] if i < 3 else [])
        node_id, _ = store.enroll(
            store.mint_token(), {"agent_id": f"a{i}", "advertise_host": f"10.0.0.{i}", "capabilities": capabilities}
        )
        ids.append(node_id)
    a1, a2, a3 = ids
    store.set_cluster("c", ids)

    def entry(to: str, at: float, send: float | None, receive: float | None, **more) -> dict:
        return {"machine": to, "at": at, "reason": None, "rtt_p50_ms": 0.5, "rtt_p99_ms": 0.9, **more} | (
            {"send_bytes_per_s": send, "receive_bytes_per_s": receive} if send else {}
        )

    finished_probe(store, a1, protocol.SUCCEEDED, [entry(a2, 100.0, 25e6, 50e6)], 1)
    finished_probe(store, a2, protocol.SUCCEEDED, [entry(a1, 200.0, 12.5e6, 100e6)], 2)  # newer, other way
    finished_probe(store, a1, protocol.SUCCEEDED, [entry(a2, 50.0, 1e6, 1e6)], 3)  # older: ignored
    finished_probe(store, a1, protocol.FAILED, [entry(a2, 300.0, 2e6, 2e6)], 4)  # a failed command: ignored
    down = entry(a3, 150.0, None, None, reason="peer_unreachable", message="cannot connect")
    finished_probe(store, a1, protocol.SUCCEEDED, [down, entry("node-elsewhere", 150.0, 1e6, 1e6)], 5)

    matrix = store.traffic_matrix("c")
    probes = {(p["from"], p["to"]): p for p in matrix["probes"]}
    assert set(probes) == {(a1, a2), (a2, a1), (a1, a3)}  # a machine of no cluster member is left out
    assert probes[(a1, a2)]["at"] == 100.0
    assert [m["probe_capable"] for m in matrix["machines"]] == [True, True, False]

    text = render(matrix)
    start = next(i for i, line in enumerate(text) if line.startswith("probes (latest"))
    rows = {line.split()[0]: line for line in text[start + 2 : start + 5]}
    # a1 -> a2: a2's newer probe measured it as its download (100 MB/s = 800 Mbit/s);
    # a2 -> a1: the same probe's upload (12.5 MB/s = 100 Mbit/s)
    assert rows["a1"].split()[2] == "800Mbit/s" and rows["a2"].split()[1] == "100Mbit/s"
    assert "peer_unreachable" in rows["a1"] and "peer_unreachable" in rows["a3"]
    assert any(line.startswith(f"probe {a1} -> {a3}: peer_unreachable: cannot connect") for line in text)
    assert f"agent lacks {protocol.PROBE_CAPABILITY} (not probed; update it): a3 ({a3})" in text


def test_no_probes_yet_shows_no_probe_table(tmp_path: Path):
    store = Store(tmp_path)
    node_id, _ = store.enroll(store.mint_token(), {"agent_id": "a1", "capabilities": [protocol.PROBE_CAPABILITY]})
    store.set_cluster("c", [node_id])
    text = render(store.traffic_matrix("c"))
    assert store.traffic_matrix("c")["probes"] == []
    assert not any(line.startswith("probes") for line in text)
