"""The metric families of one scrape, built from the supervisor's table (what `ps` shows).

families(table, usage) reads only what the supervisor already holds: worker rows with the
status each worker last sent, and per-process CPU/memory. Labels come from bounded sets
(worker, state, kind, reason, source, GPU index/UUID, path, peer node); never other ids or text.
"""

from __future__ import annotations

import platform
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

from faden_agent import __version__, protocol
from faden_agent.metrics.exposition import (
    CounterMetricFamily,
    Family,
    GaugeMetricFamily,
    Gauges,
    HistogramMetricFamily,
    InfoMetricFamily,
    Section,
)
from faden_agent.protocol.link import LINK_STATES
from faden_agent.supervisor.states import WorkerState

P = "faden_agent_"
_EXIT_CAUSE = re.compile(r"none|hung|thread_died|signal_[A-Z0-9]{1,12}|exit_\d{1,3}")
GPU_VERDICTS = ("ok", "degraded", "failed")
TARGET_STATES = ("resolving", "ok", "failing")  # the logs worker's target_state (shipper.py)
GPU_GAUGES = {
    "memory_size": ("gpu_memory_size_bytes", "GPU memory in all"),
    # the old name of gpu_memory_size_bytes (a gauge named like a counter's sum): kept for
    # one release (docs/service.md), removed in the next
    "memory_total": ("gpu_memory_total_bytes", "Deprecated: gpu_memory_size_bytes"),
    "memory_used": ("gpu_memory_used_bytes", "GPU memory in use"),
    "memory_free": ("gpu_memory_free_bytes", "GPU memory free"),
    "utilization_gpu": ("gpu_utilization_ratio", "GPU busy share of the last sample period (0..1)"),
    "temperature_c": ("gpu_temperature_celsius", "GPU temperature"),
    "power_draw_w": ("gpu_power_draw_watts", "GPU power draw"),
}
GPU_GAUGE_SOURCE = {"memory_size": "memory_total"}  # family key -> the gauges' figure
MAX_PEERS = 64
STATUS_SECTIONS = ("stream", "executor", "logs", "peer", "inventory")


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def exit_cause(cause: Any) -> str:
    """The supervisor's word for a worker's last exit (states.py), kept to its bounded shapes."""
    return cause if isinstance(cause, str) and _EXIT_CAUSE.fullmatch(cause) else "other"


def sections(
    table: dict[str, Any], usage: dict[str, tuple[float, int, int | None]], reuse: dict[str, Any] | None = None
) -> list[Section]:
    """The families of one scrape in sections; usage: process name -> (CPU seconds, RSS, PSS
    or None). reuse (kept by the caller between scrapes): a section whose inputs equal those
    of the last scrape is the same Section again, written once (exposition.py memoizes)."""
    rows = {str(w.get("name")): w for w in table.get("workers", []) if isinstance(w, dict)}
    status = {name: _dict(_dict(rows.get(name)).get("status")) for name in STATUS_SECTIONS}
    stream, executor, logs_, peer_, inventory_ = (status[name] for name in STATUS_SECTIONS)
    gauges_ = _dict(inventory_.get("gauges"))  # not the rest: its ages change at every status
    standing = tuple((name, row.get("state"), row.get("restarts"), row.get("exit_cause")) for name, row in rows.items())
    dropped = _dict(_dict(table.get("supervisor")).get("metrics")).get("dropped")
    everything = (standing, usage, dropped, stream, executor, logs_, peer_, gauges_)
    if reuse is not None and (last := reuse.get("all")) is not None and last[0] == everything:
        return [last[1][0], last[1][1], liveness_ages(rows), *last[1][3:]]  # only the ages move
    made = [
        _reused(reuse, "build", (), lambda: build(table)),
        _reused(reuse, "workers", (standing,), lambda: workers(rows)),
        liveness_ages(rows),
        _reused(reuse, "processes", (usage,), lambda: processes(usage)),  # procstat: read every few s
        _reused(reuse, "link", (stream,), lambda: link(stream)),
        _reused(reuse, "commands", (executor,), lambda: commands(executor)),
        _reused(reuse, "logs", (logs_,), lambda: logs(logs_)),
        _reused(reuse, "peer", (peer_, executor), lambda: peer(peer_, executor)),
        _reused(reuse, "inventory", (gauges_,), lambda: inventory(gauges_)),
        _reused(reuse, "endpoint", (dropped,), lambda: endpoint(dropped)),
    ]
    if reuse is not None:
        reuse["all"] = (everything, made)
    return made


def families(
    table: dict[str, Any], usage: dict[str, tuple[float, int, int | None]], reuse: dict[str, Any] | None = None
) -> Iterator[Family]:
    """Every family of one scrape, section after section (sections())."""
    for section in sections(table, usage, reuse):
        yield from section


def _reused(reuse: dict[str, Any] | None, name: str, inputs: tuple, make: Callable[[], Iterator[Family]]) -> Section:
    """The section; the last one again when made from equal inputs (a worker resends the same
    figures every few seconds: compared in C, identity first, far cheaper than rebuilt)."""
    if reuse is not None and (hit := reuse.get(name)) is not None and hit[0] == inputs:
        return hit[1]
    made = Section(make())
    if reuse is not None:
        reuse[name] = (inputs, made)
    return made


def build(table: dict[str, Any]) -> Iterator[Family]:
    info = InfoMetricFamily(P + "build", "The agent's version, protocol, Python and machine")
    info.add_metric(
        [],
        {
            "version": __version__,
            "protocol": str(protocol.PROTOCOL_VERSION),
            "python": platform.python_version(),
            "implementation": sys.implementation.name,
            "arch": platform.machine(),
        },
    )
    yield info
    started = GaugeMetricFamily(P + "start_time_seconds", "When the supervisor started (Unix time)")
    started.add_metric([], _num(_dict(table.get("supervisor")).get("started_at")) or 0.0)
    yield started


def workers(rows: dict[str, dict[str, Any]]) -> Iterator[Family]:
    state = GaugeMetricFamily(P + "worker_state", "1 for the state each worker is in", labels=["worker", "state"])
    restarts = CounterMetricFamily(P + "worker_restarts", "Times the supervisor restarted it", labels=["worker"])
    last_exit = GaugeMetricFamily(
        P + "worker_last_exit", "1 for the cause of its last exit (none: never exited)", labels=["worker", "cause"]
    )
    for name, row in rows.items():
        for value in WorkerState:
            state.add_metric([name, value.value], 1.0 if row.get("state") == value.value else 0.0)
        restarts.add_metric([name], _num(row.get("restarts")) or 0.0)
        last_exit.add_metric([name, exit_cause(row.get("exit_cause", "none"))], 1.0)
    yield from (state, restarts, last_exit)


LIVENESS_AGE = GaugeMetricFamily(
    P + "worker_liveness_age_seconds",
    "Seconds since the worker's last liveness message; its figures here are as old",
    labels=["worker"],
)


def liveness_ages(rows: dict[str, dict[str, Any]]) -> Section:
    pairs = [(name, seconds) for name, row in rows.items() if (seconds := _num(row.get("alive_age_s"))) is not None]
    return Gauges(LIVENESS_AGE, pairs)


def processes(usage: dict[str, tuple[float, int, int | None]]) -> Iterator[Family]:
    cpu = CounterMetricFamily(P + "process_cpu_seconds", "CPU time of each agent process", labels=["process"])
    rss = GaugeMetricFamily(P + "process_resident_memory_bytes", "Resident memory per process", labels=["process"])
    pss = GaugeMetricFamily(
        P + "process_proportional_memory_bytes", "PSS per process (shared pages split): they sum", labels=["process"]
    )
    for name, (cpu_s, rss_bytes, pss_bytes) in usage.items():
        cpu.add_metric([name], cpu_s)
        rss.add_metric([name], rss_bytes)
        if pss_bytes is not None:
            pss.add_metric([name], pss_bytes)
    yield from (cpu, rss, pss)


def link(status: dict[str, Any]) -> Iterator[Family]:
    data = _dict(status.get("link"))
    state = GaugeMetricFamily(P + "link_state", "1 for the backend link's state", labels=["state"])
    for value in LINK_STATES:
        state.add_metric([value], 1.0 if data.get("state") == value else 0.0)
    yield state
    contact = GaugeMetricFamily(P + "link_last_contact_timestamp_seconds", "Last exchange with the backend (Unix time)")
    if (at := _num(data.get("last_contact_at"))) is not None:
        contact.add_metric([], at)
    yield contact
    for key, name, text in (
        ("reconnects", "link_reconnects", "Stream connections after the first"),
        ("stale_commands", "link_stale_commands", "Commands at or below the cursor, not run again"),
        ("epoch_resets", "link_epoch_resets", "Cursor resets because the backend's epoch changed"),
    ):
        counter = CounterMetricFamily(P + name, text)
        counter.add_metric([], _num(data.get(key)) or 0.0)
        yield counter
    outbox = _dict(status.get("outbox"))
    depth = GaugeMetricFamily(P + "outbox_records", "Records waiting in the outbox for the backend")
    oldest = GaugeMetricFamily(P + "outbox_oldest_record_age_seconds", "Age of the oldest waiting durable record")
    if (records := _num(outbox.get("records"))) is not None:
        depth.add_metric([], records)
        oldest.add_metric([], _num(outbox.get("oldest_age_s")) or 0.0)
    yield from (depth, oldest)


def commands(status: dict[str, Any]) -> Iterator[Family]:
    counts = _dict(status.get("commands"))
    received = CounterMetricFamily(P + "commands_received", "Commands the executor received", labels=["kind"])
    for kind, count in _dict(counts.get("received")).items():
        received.add_metric([kind], _num(count) or 0.0)
    ended = CounterMetricFamily(
        P + "commands_ended", "Commands that reached a terminal state", labels=["kind", "state", "reason"]
    )
    for key, count in _dict(counts.get("ended")).items():
        parts = key.split(" ")
        if len(parts) == 3:
            ended.add_metric(parts, _num(count) or 0.0)
    yield from (received, ended)
    for key in ("running", "queued"):
        gauge = GaugeMetricFamily(P + f"commands_{key}", f"Commands {key} in the executor now")
        if (value := _num(status.get(key))) is not None:
            gauge.add_metric([], value)
        yield gauge


def logs(status: dict[str, Any]) -> Iterator[Family]:
    per_source = {
        "lines_read": "Log lines read",
        "lines_shipped": "Log lines Loki stored",
        "lines_refused": "Log lines Loki refused",
        "lines_lost": "Log lines lost before they were shipped",
    }
    sources = _dict(status.get("sources"))
    for key, text in per_source.items():
        family = CounterMetricFamily(P + f"log_{key}", text + ", per source", labels=["source"])
        for source, figures in sources.items():
            if (value := _num(_dict(figures).get(key))) is not None:
                family.add_metric([source], value)
        yield family
    for key, name, text in (
        ("lines_shipped", "log_pushed_lines", "Log lines Loki stored, all sources"),
        ("lines_rejected", "log_rejected_lines", "Log lines Loki refused (HTTP 400), all sources"),
        ("lines_too_large", "log_too_large_lines", "Log lines Loki refused as too large (HTTP 413)"),
        ("bytes_pushed", "log_pushed_bytes", "Bytes of push bodies sent to the log target"),
        ("batches", "log_batches", "Batches pushed"),
    ):
        counter = CounterMetricFamily(P + name, text)
        if (value := _num(status.get(key))) is not None:
            counter.add_metric([], value)
        yield counter
    yield from push_retries(_dict(status.get("push_retries_by_status")))
    backlog = GaugeMetricFamily(P + "log_backlog_lines", "Log lines read and not yet pushed")
    if (value := _num(status.get("backlog_lines"))) is not None:
        backlog.add_metric([], value)
    yield backlog
    yield from push_latency(_dict(status.get("push_seconds")))
    target = GaugeMetricFamily(P + "log_target_state", "1 for the log target's state", labels=["state"])
    if status:
        state = target_state(status)
        for name in TARGET_STATES:
            target.add_metric([name], 1.0 if state == name else 0.0)
    yield target


def push_retries(by_status: dict[str, Any]) -> Iterator[Family]:
    """Retried pushes by Loki's answer (429, 4xx, 5xx, no_answer): their sum is every retry.
    The old name, which repeated its label, stays one release (docs/service.md, Renamed)."""
    retries = CounterMetricFamily(P + "log_push_retries", "Pushes retried (429, 5xx, no answer), by answer", ["status"])
    old = CounterMetricFamily(
        P + "log_push_retries_by_status", "Deprecated, removed after 0.2: log_push_retries_total", labels=["status"]
    )
    for answer, count in by_status.items():
        for family in (retries, old):
            family.add_metric([str(answer)[:12]], _num(count) or 0.0)
    yield from (retries, old)


def target_state(status: dict[str, Any]) -> str:
    state = status.get("target_state")
    return state if state in TARGET_STATES else "ok"


def push_latency(snapshot: dict[str, Any]) -> Iterator[Family]:
    family = HistogramMetricFamily(P + "log_push_duration_seconds", "Time of one push to the log target")
    bounds, counts = snapshot.get("le"), snapshot.get("counts")
    if isinstance(bounds, list) and isinstance(counts, list) and len(counts) == len(bounds) + 1:
        cumulative, buckets = 0.0, []
        for bound, count in zip([*bounds, float("inf")], counts, strict=True):
            cumulative += _num(count) or 0.0
            buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), cumulative))
        family.add_metric([], buckets, _num(snapshot.get("sum")) or 0.0)
    yield family


def peer(status: dict[str, Any], executor: dict[str, Any]) -> Iterator[Family]:
    served = CounterMetricFamily(P + "peer_served_bytes", "Image bytes this machine served to peers")
    fetched = CounterMetricFamily(P + "peer_fetched_bytes", "Image bytes this machine fetched from peers")
    transfers = CounterMetricFamily(
        P + "peer_transfers", "Peer image transfers by direction and outcome", labels=["direction", "outcome"]
    )
    served.add_metric([], _num(status.get("bytes_sent")) or 0.0)
    commands = _dict(executor.get("commands"))
    fetched.add_metric([], _num(commands.get("peer_bytes_fetched")) or 0.0)
    if (count := _num(status.get("transfers_served"))) is not None:
        transfers.add_metric(["served", "ok"], count)
    for key, count in _dict(commands.get("ended")).items():
        kind, _, outcome = key.partition(" ")
        if kind == "image.fetch":
            transfers.add_metric(["fetched", outcome.split(" ")[-1]], _num(count) or 0.0)
    yield from (served, fetched, transfers)


def inventory(gauges: dict[str, Any]) -> Iterator[Family]:
    yield from gpus(_dict(gauges.get("gpu")))
    yield from container_gpus(gauges.get("containers_gpu") or [])
    yield from workloads(gauges.get("workloads") or [])
    free = GaugeMetricFamily(P + "disk_free_bytes", "Free bytes per watched path", labels=["path", "role"])
    size = GaugeMetricFamily(P + "disk_size_bytes", "Size of each watched path's file system", labels=["path", "role"])
    for disk in gauges.get("disks") or []:
        labels = [str(_dict(disk).get("path")), str(_dict(disk).get("role"))]
        if (value := _num(_dict(disk).get("free"))) is not None:
            free.add_metric(labels, value)
        if (value := _num(_dict(disk).get("total"))) is not None:
            size.add_metric(labels, value)
    yield from (free, size)
    sent = CounterMetricFamily(P + "peer_traffic_sent_bytes", "TCP bytes sent to each peer machine", labels=["peer"])
    received = CounterMetricFamily(
        P + "peer_traffic_received_bytes", "TCP bytes received from each peer machine", labels=["peer"]
    )
    rtt = GaugeMetricFamily(P + "peer_rtt_seconds", "Mean smoothed TCP RTT to each peer machine", labels=["peer"])
    for item in (gauges.get("peers") or [])[:MAX_PEERS]:
        item = _dict(item)
        label = [str(item.get("peer"))[:64]]
        for family, key, scale in ((sent, "sent_bytes", 1), (received, "received_bytes", 1), (rtt, "rtt_ms", 1e-3)):
            if (value := _num(item.get(key))) is not None:
                family.add_metric(label, value * scale)
    yield from (sent, received, rtt)


SCRAPE_OUTCOMES = ("ok", "unreachable", "timeout", "too_large", "http_status", "not_metrics", "no_endpoint")


def workloads(items: list[Any]) -> Iterator[Family]:
    """Forward progress of the serving containers (docs/commands.md): stalled, and the scrape's outcome."""
    stalled = GaugeMetricFamily(
        P + "workload_stalled", "1 while requests wait or run and no progress counter moves", labels=["container"]
    )
    scrape = GaugeMetricFamily(
        P + "workload_scrape",
        "1 for the outcome of the last scrape of its metrics port",
        labels=["container", "outcome"],
    )
    for item in items[:MAX_PEERS]:
        item = _dict(item)
        name = str(item.get("container"))[:128]
        stalled.add_metric([name], 1.0 if item.get("stalled") else 0.0)
        if item.get("scrape") in SCRAPE_OUTCOMES:
            for outcome in SCRAPE_OUTCOMES:
                scrape.add_metric([name, outcome], 1.0 if item["scrape"] == outcome else 0.0)
    yield from (stalled, scrape)


def container_gpus(items: list[Any]) -> Iterator[Family]:
    """GPU use of each managed container (a bounded set: the agent's own containers)."""
    labels = ["container", "gpu", "uuid"]
    memory = GaugeMetricFamily(P + "container_gpu_memory_used_bytes", "GPU memory of its processes", labels=labels)
    busy = GaugeMetricFamily(
        P + "container_gpu_utilization_ratio", "SM share of its processes (NVML's per-process samples)", labels=labels
    )
    for item in items[:MAX_PEERS]:
        item = _dict(item)
        item_labels = [str(item.get("container"))[:128], str(item.get("index")), str(item.get("uuid") or "")]
        if (value := _num(item.get("used_memory"))) is not None:
            memory.add_metric(item_labels, value)
        if (value := _num(item.get("utilization_sm"))) is not None:
            busy.add_metric(item_labels, value / 100)
    yield from (memory, busy)


def gpus(gpu: dict[str, Any]) -> Iterator[Family]:
    """Each GPU's series labelled by index and UUID (an index moves across reboots and driver
    reorders; the UUID joins history), its names in gpu_info, its verdict and error counters."""
    labels = ["gpu", "uuid"]
    families_ = {key: GaugeMetricFamily(P + name, text, labels=labels) for key, (name, text) in GPU_GAUGES.items()}
    info = InfoMetricFamily(P + "gpu", "Each GPU's UUID, PCI bus id and model", labels=["gpu"])
    verdict = GaugeMetricFamily(P + "gpu_health", "1 for each GPU's health verdict", labels=[*labels, "verdict"])
    node = GaugeMetricFamily(P + "node_gpu_health", "1 for the node's GPU health verdict", labels=["verdict"])
    errors = GpuErrorFamilies(labels)
    for device in gpu.get("devices") or []:
        device = _dict(device)
        index = str(device.get("index"))
        gpu_labels = [index, str(device.get("uuid") or "")]
        info.add_metric([index], {name: str(device.get(name) or "") for name in ("uuid", "pci_bus_id", "name")})
        for key, family in families_.items():
            if (value := _num(device.get(GPU_GAUGE_SOURCE.get(key, key)))) is not None:
                family.add_metric(gpu_labels, value / 100 if key == "utilization_gpu" else value)
        if device.get("verdict") in GPU_VERDICTS:
            for name in GPU_VERDICTS:
                verdict.add_metric([*gpu_labels, name], 1.0 if device["verdict"] == name else 0.0)
        errors.add(gpu_labels, _dict(device.get("errors")))
    if gpu.get("verdict") in GPU_VERDICTS:
        for name in GPU_VERDICTS:
            node.add_metric([name], 1.0 if gpu["verdict"] == name else 0.0)
    yield info
    yield from families_.values()
    yield from (verdict, node)
    yield from errors.families()


class GpuErrorFamilies:
    """The GPU error counters (gauges.gpu_errors): one family per kind, a label per part."""

    def __init__(self, labels: list[str]):
        self.xids = CounterMetricFamily(P + "gpu_xid_errors", "Xid events in the GPU's log", labels=[*labels, "xid"])
        self.ecc = CounterMetricFamily(
            P + "gpu_ecc_errors", "ECC errors by kind (NVML's counts)", labels=[*labels, "kind"]
        )
        self.retired = CounterMetricFamily(P + "gpu_retired_pages", "Pages retired by cause", labels=[*labels, "cause"])
        self.remapped = CounterMetricFamily(P + "gpu_remapped_rows", "Rows remapped by kind", labels=[*labels, "kind"])
        self.nvlink = CounterMetricFamily(
            P + "gpu_nvlink_errors", "NVLink errors summed over links, by counter", labels=[*labels, "counter"]
        )
        self.pcie = CounterMetricFamily(P + "gpu_pcie_replays", "PCIe replays", labels=labels)
        self.clock = GaugeMetricFamily(
            P + "gpu_clock_event_active_seconds", "How long each clock event has been active", labels=[*labels, "event"]
        )

    def add(self, labels: list[str], errors: dict[str, Any]) -> None:
        for family, key in (
            (self.xids, "xid"),
            (self.ecc, "ecc"),
            (self.retired, "retired_pages"),
            (self.remapped, "remapped_rows"),
            (self.nvlink, "nvlink"),
            (self.clock, "clock_events_s"),
        ):
            for part, count in _dict(errors.get(key)).items():
                if (value := _num(count)) is not None:
                    family.add_metric([*labels, str(part)[:32]], value)
        if (value := _num(errors.get("pcie_replay"))) is not None:
            self.pcie.add_metric(labels, value)

    def families(self) -> Iterator[Family]:
        yield from (self.xids, self.ecc, self.retired, self.remapped, self.nvlink, self.pcie, self.clock)


def endpoint(dropped: Any) -> Iterator[Family]:
    family = CounterMetricFamily(
        P + "metrics_connections_dropped", "Connections to this endpoint closed early: too many were open"
    )
    family.add_metric([], _num(dropped) or 0.0)
    yield family
