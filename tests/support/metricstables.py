"""Hand-written supervisor tables for the metrics endpoint's tests (a worker row with its status,
an inventory's gpu section with and without health) and their samples, read back with
prometheus_client's parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from faden_agent.protocol.histogram import Histogram
from faden_agent.supervisor.metrics.exposition import text_0_0_4
from faden_agent.supervisor.metrics.families import families
from faden_agent.workers.inventory.gauges import gauges


def render(table: dict) -> dict[str, list]:
    body = text_0_0_4(families(table, {"supervisor": (1.5, 4096, 2048)}))
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def value(samples: dict[str, list], name: str, **labels: str) -> float | None:
    hits = [s.value for s in samples.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) <= 1, hits
    return hits[0] if hits else None


def gpu_section(with_health: bool) -> dict:
    device = {
        "index": 0,
        "state": "ok",
        "uuid": "GPU-0000-a",
        "pci_bus_id": "00000000:17:00.0",
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total": 80 * 2**30,
        "usage": {
            **{"memory_used": 2**30, "memory_free": 79 * 2**30, "utilization_gpu": 37, "temperature_c": 61},
            **{"sm_active": 61.5, "sm_occupancy": 30.0, "tensor_active": 12.5, "dram_active": 44.0},  # GPM's
        },
        "gpm": {"available": True, "reason": None},
        "mig": {
            "enabled": True,
            "pending": False,
            "devices": [
                {
                    **{"slot": 0, "uuid": "MIG-0000-a", "memory_total": 10 * 2**30, "gpu_instance_id": 3},
                    "usage": {"sm_active": 20.0, "sm_occupancy": 5.0, "tensor_active": 1.0, "dram_active": 2.5},
                }
            ],
        },
    }
    section = {"available": True, "devices": [device, {"index": 1, "state": "error", "error": "GPU is lost"}]}
    if with_health:
        device["health"] = {
            "verdict": "degraded",
            "reasons": ["ecc_corrected_high"],
            "xid": [{"event": "xid", "code": 79, "at": 1.0}, {"event": "xid", "code": 79, "at": 2.0}],
            "ecc_errors": {"uncorrected_volatile": 0, "uncorrected_aggregate": 3},
            "retired_pages": {"single_bit": 1, "double_bit": 2, "pending": False},
            "remapped_rows": {"correctable": 4, "uncorrectable": 5, "pending": False, "failure": False},
            "nvlink": {"links": [], "errors": {"replay": 6, "recovery": 0, "crc_flit": 7, "crc_data": 0}},
            "pcie": {"replay": 8, "width": 16},
            "usage": {
                "ecc_corrected_volatile": 9,
                "clock_events_active_s": {"hw_slowdown": 12.5},
                "xid_totals": {"79": 2},  # ever seen: the log above keeps only the last 16
            },
        }
        section["devices"][1]["health"] = {"verdict": "failed", "reasons": ["gpu_lost"]}
        section["health"] = {"verdict": "failed", "reasons": ["gpu 1: gpu_lost"]}
    return section


def table_with(inventory_status: dict) -> dict:
    return {
        "supervisor": {"started_at": 1.0},
        "workers": [{"name": "inventory", "state": "RUNNING", "status": inventory_status}],
    }


def full_table() -> dict:
    sections = {"gpu": gpu_section(with_health=True), "disks": [{"paths": ["/x"], "roles": ["state"], "total": 9}]}
    logs = {
        "target": "http://loki (asking where to push)",
        "target_state": "resolving",
        "lines_shipped": 3,
        "push_seconds": Histogram().snapshot(),
        "push_retries_by_status": {"429": 2},
        "sources": {"journal": {"lines_read": 5}},
    }
    return {
        "supervisor": {"started_at": 1.0, "metrics": {"dropped": 0}},
        "workers": [
            {
                "name": "inventory",
                "state": "RUNNING",
                "restarts": 1,
                "last_exit": "signal SIGKILL",
                "exit_cause": "signal_SIGKILL",
                "alive_age_s": 0.5,
                "status": {"gauges": gauges(sections, None)},
            },
            {"name": "logs", "state": "FATAL", "status": logs},
            {"name": "stream", "state": "RUNNING", "status": {"link": {"state": "backoff"}, "outbox": {"records": 2}}},
        ],
    }


def samples_of(body: bytes) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out
