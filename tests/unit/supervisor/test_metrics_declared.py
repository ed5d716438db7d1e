"""Each metric declared once (protocol/metrics.py): the endpoint serves exactly the declared
families, a new declaration with a field is served with no other change, docs/service.md's
table is the declarations rendered, and no status of a wrong shape breaks a scrape."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from faden_agent.cli import metrics_table
from faden_agent.protocol import metrics as declarations
from faden_agent.protocol.metrics import METRICS, PREFIX, TYPES, Metric
from faden_agent.supervisor.metrics.declared import lead_keys, new, path_of
from faden_agent.supervisor.metrics.exposition import HistogramMetricFamily, text_0_0_4
from faden_agent.supervisor.metrics.families import PRODUCERS, SOURCES, families
from faden_agent.workers.inventory.gauges import gauges
from tests.support.metricstables import gpu_section

DOCS = Path(__file__).parents[3] / "docs" / "service.md"
OWN = {"build", "start_time_seconds", "worker_state", "worker_restarts", "worker_last_exit"}
OWN |= {"worker_liveness_age_seconds", "process_cpu_seconds", "process_resident_memory_bytes"}
OWN |= {"process_proportional_memory_bytes", "metrics_connections_dropped", "metrics_answers", "metrics_held_seconds"}
OWN |= {"metrics_answer_budget"}


def every_figure_table() -> dict:
    """A table with a figure for every family (the inventory's part made by its real producer)."""
    traffic = {"peers": [{"node_id": "n1", "sent_bytes": 5, "received_bytes": 6, "rtt_ms": 2}]}
    conditions = {"clock_unsynchronised": {"active": True, "reason": "not synchronised", "since": 1.0}}
    inventory = gauges({"gpu": gpu_section(True), "conditions": conditions}, traffic)
    inventory["gpu"]["devices"][0]["power_draw_w"] = 350.0
    inventory["disks"] = [{"path": "/", "role": "root", "free": 10, "total": 20}]
    inventory["workloads"] = [{"container": "c1", "stalled": True, "scrape": "ok"}]
    inventory["containers_gpu"] = [
        {"container": "c1", "index": 0, "uuid": "GPU-a", "used_memory": 5, "utilization_sm": 50}
    ]
    statuses = {
        "stream": {
            "link": {
                "state": "connected",
                "last_contact_at": 7.0,
                "reconnects": 3,
                "stale_commands": 0,
                "epoch_resets": 0,
            },
            "outbox": {"records": 4, "oldest_age_s": 9},
        },
        "executor": {
            "running": 1,
            "queued": 2,
            "commands": {
                "received": {"container.run": 3},
                "ended": {
                    "container.run": {"succeeded": {"none": 2}},
                    "image.fetch": {"failed": {"peer_unreachable": 1}},
                },
                "peer_bytes_fetched": 77,
            },
        },
        "logs": {
            "sources": {"journal": {"lines_read": 5, "lines_shipped": 4, "lines_refused": 0, "lines_lost": 1}},
            **{"lines_shipped": 4, "lines_rejected": 0, "lines_too_large": 0, "bytes_pushed": 100, "batches": 2},
            "push_retries_by_status": {"429": 2},
            "backlog_lines": 1,
            "push_seconds": {"le": [0.1, 1], "counts": [1, 2, 0], "sum": 1.2},
            "target_state": "failing",
        },
        "peer": {
            "bytes_sent": 10,
            "transfers_served": 2,
            "connections": {
                "waiting": 3,
                "budget": {"total": 86, "per_address": 21},
                "dropped": {"budget": 1, "address_budget": 4, "out_of_descriptors": 0, "timed_out": 2, "refused": 0},
            },
        },
        "inventory": {"gauges": inventory},
    }
    workers = [
        {"name": name, "state": "RUNNING", "restarts": 0, "alive_age_s": 1.0, "status": status}
        for name, status in statuses.items()
    ]
    return {"supervisor": {"started_at": 5.0, "metrics": {"dropped": 0}}, "workers": workers}


def scrape(table: dict) -> dict[str, list]:
    body = text_0_0_4(families(table, {"supervisor": (1.5, 4096, 2048)})).decode()
    return {family.name: family.samples for family in text_string_to_metric_families(body)}


def parsed_name(metric: Metric) -> str:
    return PREFIX + metric.name + ("_info" if metric.type == "info" else "")


def test_the_endpoint_serves_every_declared_family_with_samples_and_no_other():
    served = scrape(every_figure_table())
    assert set(served) == {parsed_name(m) for m in METRICS}
    assert [m.name for m in METRICS if not served[parsed_name(m)]] == []


def test_the_declarations_are_whole():
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names))
    for metric in METRICS:
        assert metric.type in TYPES, metric.name
        assert metric.source in ("", *SOURCES), metric.name
        made_by = (
            "field"
            if metric.field
            else "producer"
            if metric.name in PRODUCERS
            else "own"
            if not metric.source
            else None
        )
        assert made_by is not None, f"{metric.name}: neither a field nor a producer"
        if metric.field:
            assert len(lead_keys(metric)) + bool(metric.states or path_of(metric.field).keyed) == len(metric.labels)
        if metric.deprecated:
            assert metric.deprecated in names and metric.help.startswith("Deprecated")
    assert set(PRODUCERS) <= set(names)
    assert {m.name for m in METRICS if not m.source} == OWN


def test_a_new_declaration_with_a_field_is_served_with_no_other_change(monkeypatch):
    added = (
        Metric(
            "log_lines_tested", "counter", "Lines tested, per source", ("source",), source="logs", field="sources.*.t"
        ),
        Metric(
            "gpu_fans_ratio",
            "gauge",
            "Fan speed",
            ("gpu", "uuid"),
            source="inventory.gauges",
            field="gpu.devices[].fan",
            item_labels=("index", "uuid"),
            scale=0.01,
        ),
    )
    monkeypatch.setattr(declarations, "METRICS", (*METRICS, *added))
    monkeypatch.setattr(declarations, "BY_NAME", {m.name: m for m in (*METRICS, *added)})
    table = every_figure_table()
    logs, inventory = (w["status"] for w in table["workers"] if w["name"] in ("logs", "inventory"))
    logs["sources"]["journal"]["t"] = 3
    inventory["gauges"]["gpu"]["devices"][0]["fan"] = 40
    served = scrape(table)
    assert [(s.labels, s.value) for s in served["faden_agent_log_lines_tested"]] == [({"source": "journal"}, 3.0)]
    device = inventory["gauges"]["gpu"]["devices"][0]
    assert [(s.labels, s.value) for s in served["faden_agent_gpu_fans_ratio"]] == [
        ({"gpu": str(device["index"]), "uuid": device["uuid"]}, 0.4)
    ]


@pytest.mark.parametrize(
    "status",
    [
        {"sources": ["journal"], "target_state": {"a": 1}, "push_retries_by_status": "429", "batches": True},
        {"sources": {"journal": "many"}, "target_state": "exploded", "backlog_lines": 10**400 // 10**399},
        {"gauges": {"gpu": {"devices": {"0": {}}}, "disks": ["/"], "peers": [None, 7], "workloads": "all"}},
    ],
)
def test_a_status_of_a_wrong_shape_adds_no_sample_and_keeps_the_scrape(status):
    table = {"workers": [{"name": "logs", "status": status}, {"name": "inventory", "status": status}]}
    served = scrape(table)
    assert set(served) == {parsed_name(m) for m in METRICS}
    assert served["faden_agent_log_lines_read"] == [] and served["faden_agent_disk_free_bytes"] == []
    assert served["faden_agent_log_target_state"] == []  # no state made up from a word it does not know
    assert {s.labels["state"] for s in served["faden_agent_link_state"]} == set(declarations.LINK_STATES)
    assert {s.value for s in served["faden_agent_link_state"]} == {0.0}  # no link word: every state 0 (the alert)


def test_a_producer_asking_for_another_type_fails_naming_the_family():
    with pytest.raises(TypeError, match="build is declared a info, not a HistogramMetricFamily"):
        new("build", HistogramMetricFamily)


def test_the_docs_table_is_the_declarations_rendered():
    text = DOCS.read_text()
    assert metrics_table.with_table(text) == text, (
        f"docs/service.md's metrics table is stale; run: {metrics_table.COMMAND}"
    )
    rows = metrics_table.render().splitlines()[2:]
    assert len(rows) == len(METRICS)
    assert all(
        f"`{parsed_name(m).removeprefix(PREFIX)}" in row
        for m, row in zip(METRICS, rows, strict=True)
        if m.type != "counter"
    )


def test_a_help_that_would_break_the_table_fails_naming_the_metric():
    broken = Metric("x_bytes", "gauge", "a | b")
    with pytest.raises(ValueError, match="x_bytes: a cell of its row"):
        metrics_table.render([broken])


def test_the_command_rewrites_a_stale_table_in_place(tmp_path):
    doc = tmp_path / "service.md"
    doc.write_text(f"before\n{metrics_table.BEGIN}\n| stale | row |\n{metrics_table.END}\nafter\n")
    argv = [sys.executable, "-m", "faden_agent.cli.metrics_table", "--write", str(doc)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert "rewritten" in done.stdout
    assert metrics_table.render() in doc.read_text() and "| stale | row |" not in doc.read_text()
    doc.write_text("no markers\n")
    failed = subprocess.run(argv, capture_output=True, text=True)
    assert failed.returncode == 1 and failed.stderr.startswith("metrics_table: no metrics table markers")
