"""The metrics endpoint's families read from a hand-written table: GPU health verdicts when the
inventory carries them, traffic per peer, commands by kind, state and reason, retries by
answer; a status of a wrong type leaves the figure out, never the scrape; every name the
docs alert on is a sample the endpoint writes."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from faden_agent.supervisor.metrics.exposition import text_0_0_4
from faden_agent.supervisor.metrics.families import families
from faden_agent.workers.inventory.gauges import gauges
from tests.support.metricstables import gpu_section, render, table_with, value


def test_gpu_health_verdicts_are_read_when_the_inventory_carries_them():
    disks = [{"paths": ["/var/lib/faden"], "roles": ["state"], "total": 100, "usage": {"free": 40}}]
    sections = {"gpu": gpu_section(with_health=True), "disks": disks}
    samples = render(table_with({"gauges": gauges(sections, None)}))
    assert value(samples, "faden_agent_gpu_health", gpu="0", verdict="degraded") == 1
    assert value(samples, "faden_agent_gpu_health", gpu="0", verdict="ok") == 0
    assert value(samples, "faden_agent_gpu_health", gpu="1", verdict="failed") == 1
    assert value(samples, "faden_agent_node_gpu_health", verdict="failed") == 1
    assert value(samples, "faden_agent_gpu_utilization_ratio", gpu="0") == pytest.approx(0.37)
    for name, figure in {"sm_active": 0.615, "sm_occupancy": 0.3, "tensor_active": 0.125, "dram_active": 0.44}.items():
        assert value(samples, f"faden_agent_gpu_{name}_ratio", gpu="0", uuid="GPU-0000-a") == pytest.approx(figure)
    mig = {"gpu": "0", "uuid": "GPU-0000-a", "gpu_instance": "3", "mig_uuid": "MIG-0000-a"}
    assert value(samples, "faden_agent_gpu_mig_dram_active_ratio", **mig) == pytest.approx(0.025)
    assert value(samples, "faden_agent_gpu_mig_sm_active_ratio", **mig) == pytest.approx(0.2)
    assert value(samples, "faden_agent_gpu_memory_size_bytes", gpu="0") == 80 * 2**30
    # the old name, kept for one release
    assert value(samples, "faden_agent_gpu_memory_total_bytes", gpu="0") == 80 * 2**30
    assert value(samples, "faden_agent_gpu_memory_used_bytes", gpu="1") is None  # an errored GPU has no usage
    assert value(samples, "faden_agent_disk_free_bytes", path="/var/lib/faden", role="state") == 40


def test_every_gpu_series_carries_the_uuid_and_gpu_info_names_it():
    sections = {"gpu": gpu_section(with_health=True)}
    samples = render(table_with({"gauges": gauges(sections, None)}))
    info = samples["faden_agent_gpu_info"]
    assert [s.labels for s in info] == [
        {"gpu": "0", "uuid": "GPU-0000-a", "pci_bus_id": "00000000:17:00.0", "name": "NVIDIA H100 80GB HBM3"},
        {"gpu": "1", "uuid": "", "pci_bus_id": "", "name": ""},
    ]
    gpu_series = [s for name, found in samples.items() if name.startswith("faden_agent_gpu_") for s in found]
    assert gpu_series and all("uuid" in s.labels for s in gpu_series)
    on_0 = {"gpu": "0", "uuid": "GPU-0000-a"}
    assert value(samples, "faden_agent_gpu_health", verdict="degraded", **on_0) == 1
    assert value(samples, "faden_agent_gpu_xid_errors_total", xid="79", **on_0) == 2
    assert value(samples, "faden_agent_gpu_ecc_errors_total", kind="uncorrected_aggregate", **on_0) == 3
    assert value(samples, "faden_agent_gpu_ecc_errors_total", kind="corrected_volatile", **on_0) == 9
    assert value(samples, "faden_agent_gpu_retired_pages_total", cause="double_bit", **on_0) == 2
    assert value(samples, "faden_agent_gpu_remapped_rows_total", kind="uncorrectable", **on_0) == 5
    assert value(samples, "faden_agent_gpu_nvlink_errors_total", counter="crc_flit", **on_0) == 7
    assert value(samples, "faden_agent_gpu_pcie_replays_total", **on_0) == 8
    assert value(samples, "faden_agent_gpu_clock_event_active_seconds", event="hw_slowdown", **on_0) == 12.5


def test_an_inventory_without_health_gives_gauges_and_no_verdict():
    samples = render(table_with({"gauges": gauges({"gpu": gpu_section(with_health=False)}, None)}))
    assert value(samples, "faden_agent_gpu_temperature_celsius", gpu="0") == 61
    assert "faden_agent_gpu_health" not in samples and "faden_agent_node_gpu_health" not in samples


def test_traffic_per_peer_is_labelled_by_node_and_rtt_in_seconds():
    traffic = {"peers": [{"node_id": "node-b", "address": "198.18.0.2", "sent_bytes": 10, "rtt_ms": 2.5}]}
    samples = render(table_with({"gauges": gauges({}, traffic)}))
    assert value(samples, "faden_agent_peer_traffic_sent_bytes_total", peer="node-b") == 10
    assert value(samples, "faden_agent_peer_rtt_seconds", peer="node-b") == pytest.approx(0.0025)


def test_wrong_types_in_a_status_leave_the_figure_out_not_the_scrape():
    bad = {"gauges": {"gpu": {"devices": [{"index": 0, "memory_total": "lots", "verdict": ["x"]}]}, "disks": "no"}}
    table = table_with(bad)
    table["workers"].append(
        {"name": "logs", "state": "RUNNING", "status": {"sources": {"journal": []}, "batches": True}}
    )
    table["workers"].append({"name": "stream", "state": "RUNNING", "restarts": "x", "status": {"link": "?"}})
    samples = render(table)
    assert value(samples, "faden_agent_gpu_memory_size_bytes", gpu="0") is None
    assert value(samples, "faden_agent_worker_restarts_total", worker="stream") == 0
    assert value(samples, "faden_agent_log_batches_total") is None


def test_commands_by_kind_state_and_reason_and_fetch_outcomes():
    counts = {
        "received": {"image.fetch": 2, "other": 1},
        "ended": {
            "image.fetch": {"succeeded": {"ok": 1}, "failed": {"timeout": 1}},
            "other": {"rejected": {"unknown_kind": 1}},
        },
        "peer_bytes_fetched": 1234,
    }
    table = {"workers": [{"name": "executor", "state": "RUNNING", "status": {"commands": counts, "running": 0}}]}
    samples = render(table)
    assert value(samples, "faden_agent_commands_received_total", kind="image.fetch") == 2
    assert (
        value(samples, "faden_agent_commands_ended_total", kind="other", state="rejected", reason="unknown_kind") == 1
    )
    assert value(samples, "faden_agent_peer_transfers_total", direction="fetched", outcome="timeout") == 1
    assert value(samples, "faden_agent_peer_fetched_bytes_total") == 1234


def test_retries_by_answer_under_one_name_and_the_old_name_for_one_release():
    table = {
        "workers": [{"name": "logs", "status": {"push_retries": 5, "push_retries_by_status": {"429": 3, "5xx": 2}}}]
    }
    samples = render(table)
    by_answer = {s.labels["status"]: s.value for s in samples["faden_agent_log_push_retries_total"]}
    assert by_answer == {"429": 3.0, "5xx": 2.0}  # no unlabelled series: its sum is every retry
    old = {s.labels["status"]: s.value for s in samples["faden_agent_log_push_retries_by_status_total"]}
    assert old == by_answer
    body = text_0_0_4(families(table, {})).decode()
    assert "# HELP faden_agent_log_push_retries_by_status_total Deprecated" in body


def test_every_name_the_docs_alert_on_is_a_sample_the_endpoint_writes():
    """docs/service.md's alert rules and family table name only what a scrape can contain."""
    import re
    from pathlib import Path

    docs = (Path(__file__).parents[3] / "docs" / "service.md").read_text()
    rules = docs.split("### Three alert rules to start with", 1)[1]
    named = set(re.findall(r"faden_agent_\w+", rules))
    assert len(named) >= 5
    table = {
        "workers": [
            {"name": "stream", "state": "RUNNING", "status": {"link": {"state": "connected"}}},
            {
                "name": "logs",
                "state": "RUNNING",
                "status": {"lines_rejected": 0, "lines_too_large": 0, "sources": {"journal": {"lines_lost": 1}}},
            },
        ]
    }
    body = text_0_0_4(families(table, {}))
    names = {s.name for f in text_string_to_metric_families(body.decode()) for s in f.samples}
    names |= {f.name for f in text_string_to_metric_families(body.decode())}
    assert named <= names, named - names
