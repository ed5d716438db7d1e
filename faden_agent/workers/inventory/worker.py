"""Inventory worker: what this machine is and has, reported to the backend."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from faden_agent import protocol
from faden_agent.backend.producer import Reports
from faden_agent.common.backoff import Backoff
from faden_agent.common.dockerclient import make_client
from faden_agent.common.errorline import error_line
from faden_agent.disk.files import quarantine_record_id
from faden_agent.node import backend_accepts
from faden_agent.node.backend_accepts import BackendAccepts
from faden_agent.protocol.conditions import event_record_id as condition_record_id
from faden_agent.protocol.inventory import ACCEPTS_CHANGES
from faden_agent.workers.base import Worker
from faden_agent.workers.inventory.changes import DockerChangeWatcher
from faden_agent.workers.inventory.collector import Collector
from faden_agent.workers.inventory.conditions import evaluate
from faden_agent.workers.inventory.conditions.store import ConditionStore
from faden_agent.workers.inventory.conditions.tracker import NodeConditions
from faden_agent.workers.inventory.disk_events import DiskWatch
from faden_agent.workers.inventory.disk_events import record_id as disk_record_id
from faden_agent.workers.inventory.gauges import gauges
from faden_agent.workers.inventory.gpu import evidence as gpu_evidence
from faden_agent.workers.inventory.gpu.changes import HealthChanges, event_id
from faden_agent.workers.inventory.gpu.events import GpuErrorWatcher
from faden_agent.workers.inventory.gpu.kernel_xids import KernelXidReader
from faden_agent.workers.inventory.gpu.xids import XidLog
from faden_agent.workers.inventory.placement import placement
from faden_agent.workers.inventory.record import UNCHANGED, HeldFile, RecordEmitter, full_record_id
from faden_agent.workers.inventory.traffic.report import TrafficReporter
from faden_agent.workers.inventory.wire_form import wire_form
from faden_agent.workers.inventory.workloads.watcher import FILTERS, WorkloadWatcher

log = logging.getLogger(__name__)

SCRAPE_LIST_TIMEOUT_S = 30  # listing the containers to scrape; a stuck engine delays only that thread
SETTLE_S = 1.0  # a burst of events (create, start, ...) becomes one record
HELLO_POLL_MIN_S = 1.0  # a resumed chain looks for the backend's hello after 1 s, 2 s, ... the interval


class InventoryReporter:
    """One cycle: collect, decide full or unchanged, hand it to the outbox."""

    def __init__(
        self,
        collector: Collector,
        reports: Reports,
        emitter: RecordEmitter | None = None,
        disk_watch: DiskWatch | None = None,
        accepts: Callable[[], BackendAccepts] = BackendAccepts,
    ):
        self.collector = collector
        self.reports = reports
        self.emitter = emitter or RecordEmitter()
        self.disk_watch = disk_watch
        self.accepts = accepts  # what the backend said it accepts, and whether it asked for a full record
        self.cycles = 0
        self.sent: dict[str, int] = {}  # records handed to the outbox, by type
        self.last: dict[str, Any] | None = None
        self.gpu_changes = HealthChanges()
        self.sections: dict[str, Any] | None = None  # the last collected, for gauges (ps, /metrics)
        self.evidence: gpu_evidence.Evidence | None = None  # GPU evidence kept across restarts
        self.kernel: KernelXidReader | None = None  # its cursor is saved with the evidence
        self.conditions: NodeConditions | None = None  # node conditions (conditions/), kept across restarts
        self.ports_sample: Callable[[], dict[str, Any] | None] = lambda: None  # the traffic thread's last
        self._events_problem: str | None = None  # why the conditions' events wait, last logged

    def assess_conditions(self, sections: dict[str, Any]) -> None:
        """This round's node conditions into `sections`; their events to the outbox, in order
        (an event the outbox refuses, a read-only state directory, waits for the next round)."""
        assert self.conditions is not None
        try:
            signals = evaluate.signals(self.collector.config, sections, self.ports_sample(), self.conditions)
            self.conditions.update(signals, time.time())
        except Exception:  # a rule that fails leaves the conditions as they were, never the record
            log.exception("node conditions not assessed this round")
        sections["conditions"] = self.conditions.section()
        try:
            self.conditions.deliver(
                lambda event: self.reports.put(protocol.EVENT, dict(event), record_id=condition_record_id(event))
            )
        except Exception as exc:  # noqa: BLE001 - the events wait in order for the next round
            problem = error_line(exc)
            if problem != self._events_problem:  # one line per distinct problem, not one per round
                log.warning("node condition events wait in memory (%d): %s", len(self.conditions.pending), problem)
            self._events_problem = problem
        else:
            self._events_problem = None

    def report(self) -> dict[str, Any] | None:
        """The record handed to the outbox; None when nothing was due (record.py)."""
        sections = self.sections = self.collector.collect()
        if self.disk_watch is not None:
            for event in self.disk_watch.update(sections.get("disks") or []):
                self.reports.put(protocol.EVENT, event, record_id=disk_record_id(event))
        for event in self.gpu_changes.events(sections.get("gpu"), time.time()):
            self.reports.put(protocol.EVENT, event, record_id=event_id(event))
        if self.conditions is not None:
            self.assess_conditions(sections)
        if self.evidence is not None:  # after the events: a restart never repeats one
            gpus = gpu_evidence.gather(self.collector.gpu, self.gpu_changes.verdicts, self.gpu_changes.changes)
            self.evidence.save(gpus, self.kernel.cursor if self.kernel else None)
        heard = self.accepts()
        self.emitter.changes = ACCEPTS_CHANGES in heard.accepts
        self.emitter.heard = heard.heard
        if heard.full_requested_at > (self.emitter.last_full_at or 0.0):
            self.emitter.full_wanted = True
        data = self.emitter.build(wire_form(sections))
        self.cycles += 1
        if data is None:
            return None
        if data["type"] != UNCHANGED:  # full and changes records form a chain: none may be lost
            self.reports.put(protocol.INVENTORY, data, record_id=full_record_id(data))
        else:
            self.reports.put_latest(protocol.INVENTORY, data)
        self.emitter.sent(data)  # only once it is in the outbox
        self.sent[data["type"]] = self.sent.get(data["type"], 0) + 1
        self.last = data
        return data


class InventoryWorker(Worker):
    name = "inventory"

    def setup(self) -> None:
        self.reports = Reports(self.config)
        xids = XidLog(hold_s=self.config.gpu_xid_hold_sec)  # written by the GPU event thread, read by the GPU probe
        self.collector = Collector(self.config, xids=xids)
        self.reporter = InventoryReporter(
            self.collector,
            self.reports,
            RecordEmitter(usage_refresh_s=self.config.inventory_usage_sec, kept=HeldFile(self.config.state_dir)),
            DiskWatch(self.config),
            lambda: backend_accepts.read(self.config.state_dir),
        )
        self._changed = threading.Event()
        self._kernel_started = False
        self._restore_gpu_evidence()
        self._restore_conditions()
        self.watchers: list[DockerChangeWatcher | GpuErrorWatcher] = [
            DockerChangeWatcher(self.config.docker_host, self._changed.set, self.stop_event),
            GpuErrorWatcher(self._changed.set, self.stop_event, xids=xids),
        ]
        self._start_traffic()  # first: the collector's first round finds its sample of the RDMA ports
        self.start_thread("inventory-collect", self._collect_loop)
        for watcher in self.watchers:
            watcher.start(self.start_thread)
        self._start_workloads()

    def _start_kernel_xids(self) -> None:
        """The kernel's Xid lines, once a GPU was ever seen (its bus id places them): none
        on a machine without NVIDIA GPUs. The inventory worker reads them itself, not the
        log worker: the Xid log lives here, and Loki being down must not delay a verdict."""
        kernel = self.reporter.kernel
        if kernel is not None and not self._kernel_started and self.collector.gpu.seen:
            self._kernel_started = True
            self.start_thread("inventory-kernel-xids", kernel.run, finite=True)

    def _restore_gpu_evidence(self) -> None:
        """What an earlier run saw of the GPUs: Xids, verdicts, GPUs seen, baselines."""
        evidence = self.reporter.evidence = gpu_evidence.Evidence(self.config.state_dir)
        if evidence.quarantined:
            self.reports.put(protocol.EVENT, evidence.quarantined, record_id=quarantine_record_id(evidence.quarantined))
        changes = self.reporter.gpu_changes
        gpu_evidence.restore(evidence, self.collector.gpu, changes.verdicts, changes.changes)
        self.reporter.kernel = KernelXidReader(
            self.collector.gpu.health.xids,
            self.collector.gpu.uuid_of_bus,
            self._changed.set,
            self.stop_event,
            evidence.kernel_cursor,
            self.config.journal_directory,
            self.config.gpu_xid_hold_sec,
        )

    def _restore_conditions(self) -> None:
        """The node conditions as an earlier run left them: states, the rules' memories."""
        store = ConditionStore(self.config.state_dir)
        if store.quarantined:
            self.reports.put(protocol.EVENT, store.quarantined, record_id=quarantine_record_id(store.quarantined))
        self.reporter.conditions = NodeConditions(store)

    def _start_traffic(self) -> None:
        """Traffic to peer machines, NICs, RDMA ports (traffic/report.py): a sampling thread,
        and one reading the kernel's TCP destroy notifications when it may."""
        self.traffic = TrafficReporter(
            self.config.state_dir,
            self.config.sysfs_root,
            self.reports.put_latest,
            lambda data, record_id: self.reports.put(protocol.EVENT, data, record_id=record_id),
        )
        self.reporter.ports_sample = lambda: self.traffic.last_sample
        if self.traffic.open_listener():
            # finite: when the notifications fail, the records say so and sampling goes on
            self.start_thread("inventory-tcp-closed", self.traffic.listen, self.stop_event, finite=True)
        self.start_thread("inventory-traffic", self.traffic.run, self.stop_event, self.config.traffic_interval_sec)

    def _start_workloads(self) -> None:
        """Forward progress of the managed serving containers (workloads/watcher.py): here,
        not in the executor, whose threads may block only on dockerd; scraping is a periodic
        observation like the other probes, and its status reaches /metrics the same way."""
        client: list[Any] = []

        def list_containers() -> list[dict[str, Any]]:
            if not client:
                client.append(make_client(self.config.docker_host, timeout_s=SCRAPE_LIST_TIMEOUT_S))
            return client[0].api.containers(filters=FILTERS)

        self.workloads = WorkloadWatcher(
            list_containers,
            lambda data, record_id: self.reports.put(protocol.EVENT, data, record_id=record_id),
            self.config.workload_scrape_sec,
            self.config.workload_stall_sec,
            self.config.advertise_host or self.config.host,
        )
        self.start_thread("inventory-workloads", self.workloads.run, self.stop_event)

    def _collect_loop(self) -> None:
        hello_wait = Backoff(HELLO_POLL_MIN_S, self.config.inventory_interval_sec, jitter=0.0)
        while not self.stop_event.is_set():
            try:
                data = self.reporter.report()
                if data is not None:
                    log.debug("inventory %s record %s", data["type"], data["hash"])
            except Exception:  # e.g. the outbox disk is full: try again next time
                log.exception("inventory cycle failed")
            self._start_kernel_xids()
            # an earlier run's chain waits for the backend's hello: look again soon, then less often
            wait = hello_wait.next_delay() if self.reporter.emitter.waiting() else self.config.inventory_interval_sec
            if self._changed.wait(wait):
                self.stop_event.wait(SETTLE_S)
                self._changed.clear()

    def status(self) -> dict[str, Any]:
        last = self.reporter.last
        return {
            "cycles": self.reporter.cycles,
            # counts and the form in use, not the last record's type: a string that flips
            # every round would make every heartbeat carry the whole detail
            "records": dict(self.reporter.sent),
            "form": "changes" if self.reporter.emitter.changes else "full",
            "last_age_s": round(time.time() - last["collected_at"], 1) if last else None,
            "overrun": self.collector.overrun(),
            "traffic_samples": self.traffic.samples,
            "traffic_records": self.traffic.sent,
            "kernel_xids": self._kernel_status(),
            "gpu_events": self._gpu_events_status(),
            "conditions": self.reporter.conditions.active() if self.reporter.conditions else {},
            "gauges": {
                **gauges(self.reporter.sections, self.traffic.last_sample),
                "workloads": self.workloads.gauges(),
            },
            "placement": placement(self.reporter.sections),
            "workloads": self.workloads.status(),
        }

    def _gpu_events_status(self) -> dict[str, Any]:
        """GPUs in NVML's event set, and those left out as lost (ps, tests)."""
        watcher = next(w for w in self.watchers if isinstance(w, GpuErrorWatcher))
        return {"watching": watcher.watching, "lost": sorted(watcher.lost)}

    def _kernel_status(self) -> dict[str, Any] | None:
        kernel = self.reporter.kernel
        if kernel is None or not self._kernel_started:
            return None
        return {"read": kernel.read, "unplaced": kernel.unplaced, "error": kernel.last_error}

    def teardown(self) -> None:
        self._changed.set()
        for watcher in self.watchers:
            watcher.stop()
        if self.reporter.kernel is not None:
            self.reporter.kernel.stop()  # ends its journalctl
        self.traffic.stop()  # its listener blocks in the kernel until woken
        self.join_threads()
        self.reports.close()
