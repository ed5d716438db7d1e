"""The metrics endpoint's parts: families from a table (GPU health verdict read when the
inventory carries it), readiness, exit causes, the address setting, the histogram."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from faden_agent.config import _listen_addr, listen_host_port
from faden_agent.protocol.histogram import Histogram
from faden_agent.supervisor.metrics.exposition import openmetrics_1_0, text_0_0_4
from faden_agent.supervisor.metrics.families import exit_cause, families
from faden_agent.supervisor.metrics.health import readiness
from faden_agent.supervisor.metrics.procstat import ProcessUsage
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
        "ended": {"image.fetch succeeded ok": 1, "image.fetch failed timeout": 1, "other rejected unknown_kind": 1},
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


@pytest.mark.parametrize(
    "text, cause",
    [
        ("none", "none"),
        ("signal_SIGKILL", "signal_SIGKILL"),
        ("thread_died", "thread_died"),
        ("hung", "hung"),
        ("exit_1", "exit_1"),
        ("exit_1000000", "other"),
        ("signal_" + "A" * 500, "other"),
        ("killed: hung (signal SIGKILL)", "other"),  # a sentence is never read for a label
        (None, "other"),
    ],
)
def test_exit_causes_are_a_bounded_set(text, cause):
    assert exit_cause(text) == cause


def test_the_supervisor_names_each_exit_cause_from_the_status_not_its_text():
    import signal

    from faden_agent.supervisor.arbiter import exit_cause as cause_of

    killed = signal.SIGKILL  # a wait status of a process killed by SIGKILL is the signal number
    assert cause_of(killed, hung=True, thread_died=False) == "hung"
    assert cause_of(3 << 8, hung=False, thread_died=True) == "thread_died"
    assert cause_of(killed, hung=False, thread_died=False) == "signal_SIGKILL"
    assert cause_of(3 << 8, hung=False, thread_died=False) == "exit_3"


def running(link_state: str, **changes: str) -> dict:
    rows = [{"name": n, "state": changes.get(n, "RUNNING")} for n in ("stream", "executor", "inventory", "logs")]
    rows[0]["status"] = {"link": {"state": link_state, "last_error": "HTTP 502\nfrom the proxy"}}
    return {"workers": rows}


def test_readiness_rule():
    assert readiness(running("connected")) == (True, "ready: workers running, link connected")
    assert readiness(running("maintenance"))[0] is True  # only waiting out the backend's Retry-After
    ready, why = readiness(running("backoff"))
    assert not ready and why == "not ready: link backoff: HTTP 502 from the proxy"
    ready, why = readiness(running("connected", logs="FATAL", inventory="BACKOFF"))
    assert not ready and why == "not ready: worker inventory BACKOFF, logs FATAL"
    assert readiness({"workers": []}) == (
        False,
        "not ready: worker stream absent, executor absent, inventory absent, logs absent",
    )


@pytest.mark.parametrize(
    "raw, parsed",
    [("127.0.0.1:9481", ("127.0.0.1", 9481)), ("[::1]:0", ("::1", 0)), ("0.0.0.0:80", ("0.0.0.0", 80))],
)
def test_listen_addresses(raw, parsed):
    assert listen_host_port(_listen_addr(raw)) == parsed


@pytest.mark.parametrize("raw", ["9464", "host", ":9464", "a b:1", "127.0.0.1:65536", "127.0.0.1:x", "[::1:9"])
def test_bad_listen_addresses_are_refused(raw):
    with pytest.raises(ValueError):
        _listen_addr(raw)


def test_the_default_address_is_not_opentelemetry_s_prometheus_port():
    from faden_agent.config import load_config

    assert load_config({}).metrics_addr == "127.0.0.1:9481"  # 9464: OpenTelemetry's exporter


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


def test_off_and_empty_mean_no_endpoint():
    assert _listen_addr("off") is None and _listen_addr(" OFF ") is None and _listen_addr("") is None


def test_histogram_buckets_and_its_exposition():
    hist = Histogram((0.1, 1.0))
    for seconds in (0.05, 0.1, 0.5, 3.0):
        hist.observe(seconds)
    snap = hist.snapshot()
    assert snap["counts"] == [2, 1, 1] and snap["sum"] == pytest.approx(3.65)
    samples = render({"workers": [{"name": "logs", "state": "RUNNING", "status": {"push_seconds": snap}}]})
    assert value(samples, "faden_agent_log_push_duration_seconds_bucket", le="0.1") == 2
    assert value(samples, "faden_agent_log_push_duration_seconds_bucket", le="1.0") == 3
    assert value(samples, "faden_agent_log_push_duration_seconds_bucket", le="+Inf") == 4
    assert value(samples, "faden_agent_log_push_duration_seconds_count") == 4


def test_every_name_the_docs_alert_on_is_a_sample_the_endpoint_writes():
    """docs/service.md's alert rules and family table name only what a scrape can contain."""
    import re
    from pathlib import Path

    docs = (Path(__file__).parents[2] / "docs" / "service.md").read_text()
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


def test_both_formats_parse_with_prometheus_own_parsers_to_the_same_samples():
    """The hand-written writer against prometheus_client's parsers (the OpenMetrics one is strict)."""
    produced = list(families(full_table(), {"supervisor": (1.5, 4096, None), "logs": (0.1, 10, 20)}))
    text = {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for f in text_string_to_metric_families(text_0_0_4(produced).decode())
        for s in f.samples
    }
    om_families = list(openmetrics_families(openmetrics_1_0(produced).decode()))
    om = {(s.name, tuple(sorted(s.labels.items())), s.value) for f in om_families for s in f.samples}
    assert text == om and len(text) > 80
    types = {f.name: f.type for f in om_families}
    assert types["faden_agent_build"] == "info" and types["faden_agent_worker_restarts"] == "counter"
    assert types["faden_agent_log_push_duration_seconds"] == "histogram"
    assert ("faden_agent_worker_state", (("state", "FATAL"), ("worker", "logs")), 1.0) in text


def test_label_values_and_help_are_escaped():
    from faden_agent.supervisor.metrics.exposition import GaugeMetricFamily

    family = GaugeMetricFamily("faden_agent_x", 'help with \\ and "quotes"\nand a newline', labels=["path"])
    family.add_metric(['/odd "dir"\\with\nnewline'], float("inf"))
    for body in (text_0_0_4([family]), openmetrics_1_0([family])):
        parse = openmetrics_families if body.endswith(b"# EOF\n") else text_string_to_metric_families
        (parsed,) = list(parse(body.decode()))
        assert parsed.samples[0].labels["path"] == '/odd "dir"\\with\nnewline'
        assert parsed.samples[0].value == float("inf")


def test_a_section_is_reused_only_while_its_worker_sent_no_new_status():
    reuse: dict = {}
    table = full_table()
    first = list(families(table, {}, reuse))
    again = list(families(table, {}, reuse))
    link_first = next(f for f in first if f.name == "faden_agent_outbox_records")
    assert next(f for f in again if f.name == "faden_agent_outbox_records") is link_first
    assert text_0_0_4(first) == text_0_0_4(again)
    stream = next(w for w in table["workers"] if w["name"] == "stream")
    stream["status"] = {"link": {"state": "connected"}, "outbox": {"records": 7}}  # a new liveness message
    samples = {}
    for family in text_string_to_metric_families(text_0_0_4(families(table, {}, reuse)).decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    assert samples[("faden_agent_outbox_records", ())] == 7
    assert samples[("faden_agent_link_state", (("state", "connected"),))] == 1


def samples_of(body: bytes) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_a_resent_equal_status_reuses_its_section_and_a_changed_figure_rebuilds_it():
    reuse: dict = {}
    table = full_table()
    first = list(families(table, {}, reuse))
    stream = next(w for w in table["workers"] if w["name"] == "stream")
    inventory = next(w for w in table["workers"] if w["name"] == "inventory")
    stream["status"] = copy.deepcopy(stream["status"])  # the next liveness message, same figures
    inventory["status"] = {**copy.deepcopy(inventory["status"]), "last_age_s": 9.5}  # only its age moved
    again = list(families(table, {}, reuse))
    for name in ("faden_agent_outbox_records", "faden_agent_disk_size_bytes", "faden_agent_gpu_health"):
        assert next(f for f in again if f.name == name) is next(f for f in first if f.name == name)
    stream["status"] = copy.deepcopy(stream["status"])
    stream["status"]["outbox"]["records"] = 5  # deep inside the section: equality sees it
    inventory["status"] = copy.deepcopy(inventory["status"])
    inventory["status"]["gauges"]["disks"][0]["total"] = 10
    samples = samples_of(text_0_0_4(families(table, {}, reuse)))
    assert samples[("faden_agent_outbox_records", ())] == 5
    assert samples[("faden_agent_disk_size_bytes", (("path", "/x"), ("role", "state")))] == 10


def test_worker_standing_and_memory_sections_follow_a_restart_and_a_new_pss():
    reuse: dict = {}
    table = full_table()
    samples_of(text_0_0_4(families(table, {"logs": (1.0, 10, 20)}, reuse)))
    logs_row = next(w for w in table["workers"] if w["name"] == "logs")
    logs_row.update(state="RUNNING", restarts=4, last_exit="exit 3", exit_cause="exit_3", alive_age_s=2.0)
    samples = samples_of(text_0_0_4(families(table, {"logs": (1.5, 10, 30)}, reuse)))
    assert samples[("faden_agent_worker_state", (("state", "RUNNING"), ("worker", "logs")))] == 1
    assert samples[("faden_agent_worker_state", (("state", "FATAL"), ("worker", "logs")))] == 0
    assert samples[("faden_agent_worker_restarts_total", (("worker", "logs"),))] == 4
    assert samples[("faden_agent_worker_last_exit", (("cause", "exit_3"), ("worker", "logs")))] == 1
    assert samples[("faden_agent_worker_liveness_age_seconds", (("worker", "logs"),))] == 2.0
    assert samples[("faden_agent_process_cpu_seconds_total", (("process", "logs"),))] == 1.5
    assert samples[("faden_agent_process_proportional_memory_bytes", (("process", "logs"),))] == 30


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_process_usage_rereads_each_process_in_place_and_lets_go_of_a_gone_one():
    busy = subprocess.Popen(
        [sys.executable, "-c", "import sys\nwhile sys.stdin.read(1): sum(range(10**6))"], stdin=subprocess.PIPE
    )
    usage = ProcessUsage(sample_s=0)  # every read reads
    try:
        before = open_fds()
        first = usage.read({"busy": busy.pid, "self": os.getpid()})
        assert first["busy"][1] > 0 and first["busy"][2] is not None  # a new process's PSS at once
        held = open_fds() - before
        assert len(held) == 2
        cpu = first["busy"][0]
        while cpu <= first["busy"][0]:  # the kept descriptor shows the figures of now
            busy.stdin.write(b"x" * 20)
            busy.stdin.flush()
            cpu = usage.read({"busy": busy.pid, "self": os.getpid()})["busy"][0]
        assert open_fds() - before == held  # no new descriptor per read
        busy.kill()
        busy.wait()
        assert "busy" not in usage.read({"busy": busy.pid, "self": os.getpid()})
        assert len(open_fds() - before) == 1
        usage.read({"self": os.getpid()})
    finally:
        busy.kill()
        busy.wait()
        usage.close()
    assert not open_fds() - before


def test_process_usage_is_read_again_only_after_its_interval_or_when_the_processes_change():
    usage = ProcessUsage(sample_s=60)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        first = usage.read({"self": os.getpid()})
        spent = os.times().user
        while os.times().user < spent + 0.05:  # a few ticks of CPU the next read would show
            sum(range(10**5))
        assert usage.read({"self": os.getpid()}) is first  # the same processes within the interval
        both = usage.read({"self": os.getpid(), "sleeper": sleeper.pid})  # a new process: read at once
        assert both["sleeper"][1] > 0 and both["self"][0] > first["self"][0]
    finally:
        sleeper.kill()
        sleeper.wait()
        usage.close()
