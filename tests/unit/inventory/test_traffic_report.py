"""When a traffic record is sent (the change rule and its thresholds), and the NCCL fall-back
warning, once per episode."""

from __future__ import annotations

from faden_agent.workers.inventory.traffic.nccl import FallbackWatch
from faden_agent.workers.inventory.traffic.report import changed


def _record(rate: float | None, rtt: float | None = 1.0, connections: int = 1) -> dict:
    return {
        "cluster": "c",
        "not_measured": [],
        "infiniband": None,
        "nics": [],
        "peers": [
            {
                "address": "10.0.0.2",
                "sent_bytes_per_s": rate,
                "received_bytes_per_s": 0.0,
                "rtt_ms": rtt,
                "min_rtt_ms": rtt,
                "connections": connections,
                "interface": "eth0",
                "node_id": "n2",
                "sent_bytes": 123,
            }
        ],
    }


def test_a_record_is_sent_only_when_it_changed_beyond_the_thresholds():
    assert changed(None, _record(0.0))
    assert not changed(_record(0.0), _record(1000.0))  # under 64 KiB/s
    assert not changed(_record(10e6), _record(10.5e6))  # under 10 %
    assert changed(_record(10e6), _record(12e6))
    assert changed(_record(None), _record(0.0))  # measured at last
    assert not changed(_record(0.0, rtt=10.0), _record(0.0, rtt=10.8))
    assert changed(_record(0.0, rtt=10.0), _record(0.0, rtt=20.0))
    assert changed(_record(0.0), _record(0.0, connections=2))
    counted = [dict(_record(0.0), not_measured=[f"sockets in {n} other network namespaces"]) for n in (3, 4)]
    assert not changed(*counted) and changed(_record(0.0), counted[0])  # the count moves; the note comes


def _sample(tcp_rate: float, rdma_rate: float | None, at: float) -> dict:
    port = {
        "device": "mlx5_0",
        "port": "1",
        "state": "ACTIVE",
        "counters": {"tx_bytes": 1},
        "tx_bytes_per_s": rdma_rate,
        "rx_bytes_per_s": 0.0,
    }
    return {
        "collected_at": at,
        "infiniband": [port],
        "peers": [{"address": "10.0.0.2", "node_id": "n2", "sent_bytes_per_s": tcp_rate, "received_bytes_per_s": 0}],
    }


def test_nccl_fallback_warning_after_two_samples_once_per_episode():
    watch = FallbackWatch()
    assert watch.check(_sample(50e6, 0.0, 1)) is None
    event = watch.check(_sample(50e6, 0.0, 2))
    assert event["type"] == "traffic.rdma_idle_under_tcp_load" and event["peers"][0]["address"] == "10.0.0.2"
    assert watch.check(_sample(50e6, 0.0, 3)) is None  # once per episode
    assert watch.check(_sample(50e6, 40e6, 4)) is None  # RDMA moves: over, re-armed
    assert watch.check(_sample(50e6, 0.0, 5)) is None
    assert watch.check(_sample(50e6, 0.0, 6)) is not None
    assert FallbackWatch().check({**_sample(50e6, 0.0, 7), "infiniband": None}) is None  # no RDMA: no warning
