"""The inventory's thread that scrapes managed serving containers: every WORKLOAD_SCRAPE_SEC
it lists the managed containers labelled with a metrics port, scrapes them one at a time
(scrape.py), reports workload.stalled / workload.recovered (progress.py), and keeps each
one's scrape state and endpoint for status, /metrics and Prometheus discovery."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from faden_agent import protocol
from faden_agent.workers.inventory.workloads.progress import Progress
from faden_agent.workers.inventory.workloads.scrape import ScrapeFailed, scrape

if TYPE_CHECKING:
    from faden_agent.protocol.status import WorkloadGauges, WorkloadsStatus, WorkloadStatus

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT_S = 5.0  # each scrape's whole exchange; a round of N hung endpoints takes N times it
MAX_CONTAINERS = 64
MAX_PATH = 256
FILTERS = {"label": [f"{protocol.LABEL_MANAGED}=true", protocol.LABEL_METRICS_PORT]}

Emit = Callable[[dict[str, Any], str], Any]  # (event data, record id)


def endpoint(summary: dict[str, Any]) -> tuple[str, int, str] | str:
    """(host, port, path) of a container from Docker's list entry, or why there is none."""
    labels: dict[str, Any] = summary["Labels"] if isinstance(summary.get("Labels"), dict) else {}
    port_text = str(labels.get(protocol.LABEL_METRICS_PORT, ""))
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return f"label {protocol.LABEL_METRICS_PORT} is not a port: {port_text[:20]!r}"
    path = labels.get(protocol.LABEL_METRICS_PATH) or "/metrics"
    if not path.startswith("/") or len(path) > MAX_PATH or any(c.isspace() or ord(c) < 32 for c in path):
        return f"label {protocol.LABEL_METRICS_PATH} is not a URL path"
    if (summary.get("HostConfig") or {}).get("NetworkMode") == "host":
        return "127.0.0.1", int(port_text), path
    networks = (summary.get("NetworkSettings") or {}).get("Networks") or {}
    address = next((n.get("IPAddress") for n in networks.values() if isinstance(n, dict) and n.get("IPAddress")), None)
    if not address:
        return "the container has no IP address (not running, or no network)"
    return address, int(port_text), path


def advertised(summary: dict[str, Any], address: str, port: int, machine_host: str | None) -> str:
    """Where Prometheus elsewhere reaches the metrics port: the machine's address for host
    networking or a port published on every address, the published address, else the
    container's own (reachable from this machine only)."""
    if (summary.get("HostConfig") or {}).get("NetworkMode") == "host" and machine_host:
        return f"{machine_host}:{port}"
    for mapping in summary.get("Ports") or ():
        if mapping.get("PrivatePort") == port and mapping.get("PublicPort") and mapping.get("Type", "tcp") == "tcp":
            host = mapping.get("IP") or ""
            if host in ("", "0.0.0.0", "::") and machine_host:
                return f"{machine_host}:{mapping['PublicPort']}"
            if host not in ("", "0.0.0.0", "::", "127.0.0.1", "::1"):
                return f"[{host}]:{mapping['PublicPort']}" if ":" in host else f"{host}:{mapping['PublicPort']}"
    return f"{address}:{port}"


class WorkloadWatcher:
    def __init__(
        self,
        list_containers: Callable[[], list[dict[str, Any]]],
        emit: Emit,
        interval_s: float,
        stall_s: float,
        machine_host: str | None = None,
    ):
        self.list_containers = list_containers
        self.machine_host = machine_host
        self.emit = emit
        self.interval_s = interval_s
        self.stall_s = stall_s
        self.progress: dict[str, Progress] = {}
        self.state: dict[str, dict[str, Any]] = {}  # by container id: name, labels, endpoint, scrape outcome
        self.rounds = 0
        self.list_error: str | None = None

    def run(self, stop_event: threading.Event) -> None:
        while not stop_event.is_set():
            started = time.monotonic()
            self.round()
            stop_event.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def round(self) -> None:
        try:
            summaries = self.list_containers()[:MAX_CONTAINERS]
            self.list_error = None
        except Exception as exc:  # noqa: BLE001 - the engine is away: keep the state, try next round
            self.list_error = f"{type(exc).__name__}: {str(exc)[:200]}"
            return
        present = {s["Id"] for s in summaries if s.get("Id")}
        for gone in set(self.state) - present:
            self.state.pop(gone, None)
            self.progress.pop(gone, None)
        for summary in summaries:
            if not summary.get("Id"):
                continue
            try:
                self._scrape_one(summary)
            except Exception:  # a bug with one container must not end the thread (and the worker)
                log.exception("scraping container %s failed", str(summary.get("Id"))[:12])
        self.rounds += 1

    def _scrape_one(self, summary: dict[str, Any]) -> None:
        container_id = summary["Id"]
        labels: dict[str, Any] = summary["Labels"] if isinstance(summary.get("Labels"), dict) else {}
        names = summary.get("Names") or ["/" + container_id[:12]]
        entry = self.state.setdefault(container_id, {"name": container_id[:12]})
        entry.update(
            name=str(names[0]).lstrip("/"),
            cluster=labels.get(protocol.LABEL_CLUSTER),
            workload=labels.get(protocol.LABEL_WORKLOAD),
        )
        target = endpoint(summary)
        if isinstance(target, str):
            self._failed(entry, "no_endpoint", target)
            return
        host, port, path = target
        entry["endpoint"] = {
            "address": f"{host}:{port}",
            "path": path,
            "target": advertised(summary, host, port, self.machine_host),
        }
        try:
            samples = scrape(host, port, path, min(SCRAPE_TIMEOUT_S, self.interval_s))
        except ScrapeFailed as exc:
            self._failed(entry, exc.reason, str(exc))
            return
        entry.update(scrape="ok", message=None)
        progress = self.progress.setdefault(container_id, Progress(self.stall_s))
        now = time.time()
        change = progress.update(samples, now)
        entry.update(engine=progress.last["engine"], in_flight=progress.last["in_flight"])
        entry["stalled"] = progress.stalled_since is not None
        if change is not None:
            kind, details = change
            data = {
                "type": kind,
                "container_id": container_id,
                "name": entry["name"],
                "cluster": entry["cluster"],
                "workload": entry["workload"],
                "time": now,
                **details,
            }
            log.warning("%s: %s (%s)", entry["name"], kind, details)
            self.emit(data, f"wl:{container_id}:{kind}:{int(now * 1e9)}")

    def _failed(self, entry: dict[str, Any], reason: str, message: str) -> None:
        if entry.get("scrape") != reason:
            log.warning("metrics of %s: %s (%s)", entry["name"], reason, message)
        entry.update(scrape=reason, message=message[:300])

    def status(self) -> WorkloadsStatus:
        """For the worker's status: each container's scrape outcome and whether it is stalled."""
        containers: dict[str, WorkloadStatus] = {
            entry["name"]: {
                "cluster": entry.get("cluster"),
                "workload": entry.get("workload"),
                "scrape": entry.get("scrape"),
                "message": entry.get("message"),
                "engine": entry.get("engine"),
                "stalled": entry.get("stalled"),
                "endpoint": entry.get("endpoint"),
            }
            for entry in self.state.values()
        }
        return {"rounds": self.rounds, "list_error": self.list_error, "containers": containers}

    def gauges(self) -> list[WorkloadGauges]:
        """Per container, for /metrics: the scrape's outcome (a bounded word) and stalled or not."""
        return [
            {"container": entry["name"][:128], "scrape": entry.get("scrape"), "stalled": bool(entry.get("stalled"))}
            for entry in list(self.state.values())[:MAX_CONTAINERS]
        ]
