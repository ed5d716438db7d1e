"""The metric families of one scrape, built from the supervisor's table (what `ps` shows):
worker rows with the status each worker last sent, and per-process CPU/memory. Every family is
declared in protocol/metrics.py; one with a `field` is read by it (declared.py), the rest are
made by the producers here. Labels come from bounded sets; never other ids or text."""

from __future__ import annotations

import platform
import re
import sys
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from faden_agent import __version__, protocol
from faden_agent.protocol import metrics as declarations
from faden_agent.supervisor.metrics.declared import as_dict, label, new, number, read, walk
from faden_agent.supervisor.metrics.exposition import Family, Gauges, HistogramMetricFamily, InfoMetricFamily, Section
from faden_agent.supervisor.states import WorkerState

_EXIT_CAUSE = re.compile(r"none|hung|thread_died|signal_[A-Z0-9]{1,12}|exit_\d{1,3}")
SOURCES = ("stream", "executor", "logs", "peer", "inventory.gauges")  # the gauges alone: the rest's ages move
ALSO_READS = {"peer": ("executor",)}  # peer_transfers counts the executor's fetches too


def exit_cause(cause: Any) -> str:
    """The supervisor's word for a worker's last exit (states.py), kept to its bounded shapes."""
    return cause if isinstance(cause, str) and _EXIT_CAUSE.fullmatch(cause) else "other"


def source_statuses(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each declared source's status: a worker's last one (`inventory.gauges`: a part of it)."""
    out = {}
    for source in SOURCES:
        worker, _, part = source.partition(".")
        status = as_dict(as_dict(rows.get(worker)).get("status"))
        out[source] = as_dict(walk(status, part.split("."))) if part else status
    return out


def sections(
    table: dict[str, Any], usage: dict[str, tuple[float, int, int | None]], reuse: dict[str, Any] | None = None
) -> list[Section]:
    """The families of one scrape in sections; usage: process name -> (CPU seconds, RSS, PSS
    or None). reuse (kept by the caller between scrapes): a section whose inputs equal those
    of the last scrape is the same Section again, written once (exposition.py memoizes)."""
    rows = {str(w.get("name")): w for w in table.get("workers", []) if isinstance(w, dict)}
    statuses = source_statuses(rows)
    standing = tuple((name, row.get("state"), row.get("restarts"), row.get("exit_cause")) for name, row in rows.items())
    endpoint_figures = as_dict(as_dict(table.get("supervisor")).get("metrics"))
    served = tuple(endpoint_figures.get(key) for key in ENDPOINT_FIGURES)
    everything = (standing, usage, served, *statuses.values())
    if reuse is not None and (last := reuse.get("all")) is not None and last[0] == everything:
        return [last[1][0], last[1][1], liveness_ages(rows), *last[1][3:]]  # only the ages move
    made = [
        _reused(reuse, "build", (), lambda: build(table)),
        _reused(reuse, "workers", (standing,), lambda: workers(rows)),
        liveness_ages(rows),
        _reused(reuse, "processes", (usage,), lambda: processes(usage)),  # procstat: read every few s
    ]
    for source in SOURCES:
        inputs = tuple(statuses[name] for name in (source, *ALSO_READS.get(source, ())))
        made.append(_reused(reuse, source, inputs, partial(from_source, source, statuses)))
    made.append(_reused(reuse, "endpoint", (served,), lambda: endpoint(served)))
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


def from_source(source: str, statuses: dict[str, dict[str, Any]]) -> Iterator[Family]:
    """The families declared on `source`, in their order: read by their field, else made by
    their producer here."""
    for metric in declarations.METRICS:
        if metric.source == source:
            yield read(metric, statuses[source]) if metric.field else PRODUCERS[metric.name](statuses)


def build(table: dict[str, Any]) -> Iterator[Family]:
    info = new("build", InfoMetricFamily)
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
    started = new("start_time_seconds")
    started.add_metric([], number(as_dict(table.get("supervisor")).get("started_at")) or 0.0)
    yield started


def workers(rows: dict[str, dict[str, Any]]) -> Iterator[Family]:
    state, restarts, last_exit = new("worker_state"), new("worker_restarts"), new("worker_last_exit")
    for name, row in rows.items():
        for value in WorkerState:
            state.add_metric([name, value.value], 1.0 if row.get("state") == value.value else 0.0)
        restarts.add_metric([name], number(row.get("restarts")) or 0.0)
        last_exit.add_metric([name, exit_cause(row.get("exit_cause", "none"))], 1.0)
    yield from (state, restarts, last_exit)


LIVENESS_AGE = new("worker_liveness_age_seconds")


def liveness_ages(rows: dict[str, dict[str, Any]]) -> Section:
    pairs = [(name, seconds) for name, row in rows.items() if (seconds := number(row.get("alive_age_s"))) is not None]
    return Gauges(LIVENESS_AGE, pairs)


def processes(usage: dict[str, tuple[float, int, int | None]]) -> Iterator[Family]:
    cpu = new("process_cpu_seconds")
    rss = new("process_resident_memory_bytes")
    pss = new("process_proportional_memory_bytes")
    for name, (cpu_s, rss_bytes, pss_bytes) in usage.items():
        cpu.add_metric([name], cpu_s)
        rss.add_metric([name], rss_bytes)
        if pss_bytes is not None:
            pss.add_metric([name], pss_bytes)
    yield from (cpu, rss, pss)


ENDPOINT_FIGURES = ("dropped", "answered", "held_s", "budget")  # the table's, in the order of:
ENDPOINT_FAMILIES = ("metrics_connections_dropped", "metrics_answers", "metrics_held_seconds", "metrics_answer_budget")


def endpoint(figures: tuple[Any, ...]) -> Iterator[Family]:
    for name, value in zip(ENDPOINT_FAMILIES, figures, strict=True):
        family = new(name)
        family.add_metric([], number(value) or 0.0)
        yield family


def ended_counts(executor: dict[str, Any]) -> Iterator[tuple[str, str, str, float]]:
    """(kind, state, reason, commands) of the executor's ended counts (kind -> state -> reason)."""
    for kind, states in as_dict(as_dict(executor.get("commands")).get("ended")).items():
        for state, reasons in as_dict(states).items():
            for reason, count in as_dict(reasons).items():
                yield label(kind), label(state), label(reason), number(count) or 0.0


def commands_ended(statuses: dict[str, dict[str, Any]]) -> Family:
    family = new("commands_ended")
    for kind, state, reason, count in ended_counts(statuses["executor"]):
        family.add_metric([kind, state, reason], count)
    return family


def push_latency(statuses: dict[str, dict[str, Any]]) -> Family:
    family = new("log_push_duration_seconds", HistogramMetricFamily)
    snapshot = as_dict(statuses["logs"].get("push_seconds"))
    bounds, counts = snapshot.get("le"), snapshot.get("counts")
    if isinstance(bounds, list) and isinstance(counts, list) and len(counts) == len(bounds) + 1:
        cumulative, buckets = 0.0, []
        for bound, count in zip([*bounds, float("inf")], counts, strict=True):
            cumulative += number(count) or 0.0
            buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), cumulative))
        family.add_metric([], buckets, number(snapshot.get("sum")) or 0.0)
    return family


def peer_transfers(statuses: dict[str, dict[str, Any]]) -> Family:
    """Served by the peer worker; fetched: the executor's `image.fetch` outcomes."""
    family = new("peer_transfers")
    if (count := number(statuses["peer"].get("transfers_served"))) is not None:
        family.add_metric(["served", "ok"], count)
    for kind, _state, reason, count in ended_counts(statuses["executor"]):
        if kind == "image.fetch":
            family.add_metric(["fetched", reason], count)
    return family


def gpu_info(statuses: dict[str, dict[str, Any]]) -> Family:
    family = new("gpu", InfoMetricFamily)
    for device in as_dict(statuses["inventory.gauges"].get("gpu")).get("devices") or []:
        device = as_dict(device)
        family.add_metric(
            [label(device.get("index"))], {key: label(device.get(key)) for key in ("uuid", "pci_bus_id", "name")}
        )
    return family


PRODUCERS: dict[str, Callable[[dict[str, dict[str, Any]]], Family]] = {
    "commands_ended": commands_ended,
    "log_push_duration_seconds": push_latency,
    "peer_transfers": peer_transfers,
    "gpu": gpu_info,
}
