"""Inventory worker: what this machine is and has, reported to the backend. It alone holds NVML
and the GPU evidence: its REP socket is the door other processes ask about GPUs
(ipc/inventory_door.py). GPU verdicts are read every heartbeat interval between full rounds."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import zmq

from faden_agent import protocol
from faden_agent.backend.producer import Reports
from faden_agent.common.backoff import Backoff
from faden_agent.common.errorline import error_line
from faden_agent.disk.files import quarantine_record_id
from faden_agent.engine.client import EngineClient
from faden_agent.ipc import Channel, Message
from faden_agent.ipc import inventory_door as door
from faden_agent.node import backend_accepts, pci
from faden_agent.node.backend_accepts import BackendAccepts
from faden_agent.protocol.conditions import event_record_id as condition_record_id
from faden_agent.protocol.inventory import ACCEPTS_CHANGES
from faden_agent.workers.base import Worker
from faden_agent.workers.inventory.changes import DockerChangeWatcher
from faden_agent.workers.inventory.collector import Collector
from faden_agent.workers.inventory.conditions import evaluate
from faden_agent.workers.inventory.conditions.kernel import KernelConditions, KernelView
from faden_agent.workers.inventory.conditions.store import ConditionStore
from faden_agent.workers.inventory.conditions.tracker import NodeConditions
from faden_agent.workers.inventory.disk_events import DiskWatch
from faden_agent.workers.inventory.disk_events import record_id as disk_record_id
from faden_agent.workers.inventory.gauges import gauges
from faden_agent.workers.inventory.gpu import evidence as gpu_evidence
from faden_agent.workers.inventory.gpu.changes import HealthChanges, event_id, forgotten_event, replaced_event
from faden_agent.workers.inventory.gpu.events import GpuErrorWatcher
from faden_agent.workers.inventory.gpu.holds import Holds, read_boot_id
from faden_agent.workers.inventory.gpu.kernel_xids import KernelXids
from faden_agent.workers.inventory.gpu.node_notes import NodeNotes
from faden_agent.workers.inventory.gpu.remedies import Remedies
from faden_agent.workers.inventory.gpu.remedy import Tools
from faden_agent.workers.inventory.gpu.xids import XidLog
from faden_agent.workers.inventory.kernel.lines import KernelLines
from faden_agent.workers.inventory.placement import placement
from faden_agent.workers.inventory.record import UNCHANGED, HeldFile, RecordEmitter, full_record_id
from faden_agent.workers.inventory.traffic.report import TrafficReporter
from faden_agent.workers.inventory.wire_form import wire_form
from faden_agent.workers.inventory.workloads.progress import STALLED
from faden_agent.workers.inventory.workloads.watcher import FILTERS, WorkloadWatcher

if TYPE_CHECKING:
    from faden_agent.protocol.status import GpuRemedyStatus, InventoryStatus, KernelLinesStatus

log = logging.getLogger(__name__)

SCRAPE_LIST_TIMEOUT_S = 30  # listing the containers to scrape; a stuck engine delays only that thread
SETTLE_S = 1.0  # a burst of events (create, start, ...) becomes one record
HELLO_POLL_MIN_S = 1.0  # a resumed chain looks for the backend's hello after 1 s, 2 s, ... the interval


class InventoryReporter:
    """One cycle: collect, decide full or unchanged, hand it to the outbox. `evidence` (GPU
    evidence kept across restarts) and `kernel` (the kernel's lines, their cursor saved with
    the evidence) come restored, with the `gpu_changes` they hold; `conditions` (node
    conditions, kept across restarts) read the traffic thread's `ports_sample` and the
    kernel lines' `kernel_view` each round."""

    def __init__(
        self,
        collector: Collector,
        reports: Reports,
        emitter: RecordEmitter | None = None,
        disk_watch: DiskWatch | None = None,
        accepts: Callable[[], BackendAccepts] = BackendAccepts,
        gpu_changes: HealthChanges | None = None,
        evidence: gpu_evidence.Evidence | None = None,
        kernel: KernelLines | None = None,
        conditions: NodeConditions | None = None,
        ports_sample: Callable[[], dict[str, Any] | None] = lambda: None,
        kernel_view: Callable[[], KernelView | None] = lambda: None,
    ):
        self.collector = collector
        self.reports = reports
        self.emitter = emitter or RecordEmitter()
        self.disk_watch = disk_watch
        self.accepts = accepts  # what the backend said it accepts, and whether it asked for a full record
        self.cycles = 0
        self.sent: dict[str, int] = {}  # records handed to the outbox, by type
        self.last: dict[str, Any] | None = None
        self.gpu_changes = gpu_changes or HealthChanges()
        self.sections: dict[str, Any] | None = None  # the last collected, for gauges (ps, /metrics)
        self.evidence = evidence
        self.kernel = kernel
        self.forgotten: list[dict[str, Any]] = []  # gpu.forgotten events the door queued
        self.conditions = conditions
        self.ports_sample = ports_sample
        self.kernel_view = kernel_view
        self._events_problem: str | None = None  # why the conditions' events wait, last logged

    def assess_conditions(self, sections: dict[str, Any]) -> None:
        """This round's node conditions into `sections`; their events to the outbox, in order
        (an event the outbox refuses, a read-only state directory, waits for the next round)."""
        assert self.conditions is not None
        try:
            config, ports, kernel = self.collector.config, self.ports_sample(), self.kernel_view()
            signals = evaluate.signals(config, sections, ports, self.conditions, kernel=kernel)
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
        # the kernel lines' position before the conditions read their lines: a restart reads none lost
        cursor = self.kernel_cursor()
        sections = self.collector.collect()
        if self.disk_watch is not None:
            for event in self.disk_watch.update(sections.get("disks") or []):
                self.reports.put(protocol.EVENT, event, record_id=disk_record_id(event))
        now = time.time()
        while self.collector.gpu.replaced:
            replaced = replaced_event(self.collector.gpu.replaced.pop(0), now)
            self.gpu_changes.forget(replaced["old_uuid"])
            self.reports.put(protocol.EVENT, replaced, record_id=event_id(replaced))
        while self.forgotten:
            forgotten = self.forgotten.pop(0)
            self.reports.put(protocol.EVENT, forgotten, record_id=event_id(forgotten))
        for event in self.gpu_changes.events(sections.get("gpu"), now):
            self.reports.put(protocol.EVENT, event, record_id=event_id(event))
        if self.conditions is not None:
            self.assess_conditions(sections)
        # published whole: the status (ps, /metrics) never reads a round without its conditions
        self.sections = sections
        if self.evidence is not None:  # after the events: a restart never repeats one
            self.evidence.save(self.gathered(cursor))
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

    def kernel_cursor(self) -> str | None:
        return self.kernel.cursor if self.kernel else None

    def gathered(self, cursor: str | None) -> dict[str, Any]:
        """The GPU evidence as it is in memory (gpu-evidence.json's content), with the kernel
        lines' position `cursor`."""
        return gpu_evidence.gather(self.collector.gpu, self.gpu_changes.verdicts, self.gpu_changes.changes, cursor)

    def gpu_moved(self) -> bool:
        """The GPU probe alone: whether a verdict or reason differs from the last record's."""
        section = self.collector.gpu_round()
        last = (self.sections or {}).get("gpu")
        return bool(self.collector.gpu.replaced) or (section is not None and verdicts(section) != verdicts(last))


def verdicts(section: dict[str, Any] | None) -> Any:
    """What of a GPU section a scheduler acts on: the node's and each GPU's verdict and reasons."""
    if not section:
        return None
    gpus = [*(section.get("devices") or ()), *(section.get("missing") or ())]
    judged = [
        (g.get("index"), g.get("uuid"), (g.get("health") or {}).get("verdict"), (g.get("health") or {}).get("reasons"))
        for g in gpus
    ]
    return section.get("health"), judged


class InventoryWorker(Worker):
    name = "inventory"

    def setup(self) -> None:
        self.starting = True  # until the first round
        self.reports = Reports(self.config)
        # the boot id of this run (a new one ended every reboot-class hold), GPU_XID_HOLD_SEC
        holds = Holds(self.config.gpu_xid_hold_sec, read_boot_id(self.config.boot_id_file))
        xids = XidLog(holds=holds)  # written by the GPU event thread and the kernel lines, read by the GPU probe
        self._changed = threading.Event()
        self.gpu_watcher = GpuErrorWatcher(
            self._changed.set, self.stop_event, xids=xids, hung_after_s=self.config.inventory_probe_timeout_sec
        )
        self.notes = NodeNotes(
            self.config.systemctl,
            self.config.inventory_interval_sec,
            kernel_problem=self._kernel_problem,
            watch_problems=self.gpu_watcher.problems,
        )
        self.collector = Collector(self.config, xids=xids, gpu_notes=self.notes)
        self._kernel_started = False
        self._gpus_on_bus = False  # NVIDIA GPUs on the PCI bus, NVML's or not: for good once seen
        changes, evidence, kernel = self._restore_gpu_evidence()
        self.reporter = InventoryReporter(
            self.collector,
            self.reports,
            RecordEmitter(usage_refresh_s=self.config.inventory_usage_sec, kept=HeldFile(self.config.state_dir)),
            DiskWatch(self.config),
            lambda: backend_accepts.read(self.config.state_dir),
            changes,
            evidence,
            kernel,
            self._restore_conditions(kernel),
            lambda: self.traffic.last_sample,  # the traffic thread's (_start_traffic, before the first round)
            self._kernel_view,
        )
        self._captures: Any = None  # capture/triggers.py, made at the first capture
        self._captures_made = threading.Lock()  # by the workloads thread or the main loop, once
        self.remedies = Remedies(
            Tools(
                probe=self.collector.gpu,
                watcher=self.gpu_watcher,
                section=lambda: self.collector.gpu.last_section,
                fabric_manager=self.notes.fabric_manager,
                dcgmi=self.config.dcgmi,
                nvidia_smi=self.config.nvidia_smi,
                on_change=self._changed.set,
                remember_group=lambda pgid: None,  # Remedies notes it
            ),
            self.start_thread,
            self.config.runtime_dir,
        )
        self.watchers: list[DockerChangeWatcher | GpuErrorWatcher] = [
            DockerChangeWatcher(self.config.docker_host, self._changed.set, self.stop_event),
            self.gpu_watcher,
        ]
        self._start_traffic()  # first: the collector's first round finds its sample of the RDMA ports
        self.start_thread("inventory-collect", self._collect_loop)
        for watcher in self.watchers:
            watcher.start(self.start_thread)
        self._start_workloads()

    # --- the door (ipc/inventory_door.py)

    def channels(self) -> list[Channel]:
        self.requests = Channel.bind(zmq.REP, self.endpoints.inventory)
        return [self.requests]

    def handle(self, channel: Channel, message: Message) -> None:
        """One door request, answered at once (a REP socket must answer each before the next)."""
        body = message.body if isinstance(message.body, dict) else {}
        try:
            if message.type == door.GPU_FORGET:
                answer: dict[str, Any] = dict(self._forget(body))
            elif message.type == door.GPU_EVIDENCE:
                answer = dict(self._evidence(body))
            elif message.type == door.CAPTURE:
                answer = dict(self._capture(body))
            elif message.type == door.GPU_USERS:
                answer = dict(self._users(body))
            elif message.type in (door.GPU_CHECK, door.GPU_RESET):
                answer = dict(self.remedies.start(message.type, body))
            elif message.type == door.GPU_JOB:
                since = body.get("since")
                answer = dict(self.remedies.poll(str(body.get("job")), since if type(since) is int else 0))
            elif message.type == door.GPU_CANCEL:
                answer = dict(self.remedies.cancel(str(body.get("job"))))
            else:
                answer = {
                    "message": f"unknown request {protocol.quote(message.type, 60)}; this door answers {door.KINDS}"
                }
                channel.send(door.ERROR, answer)
                return
            channel.send(message.type, answer)
        except Exception as exc:  # noqa: BLE001 - a request's fault is its answer, never the worker's end
            log.exception("inventory door: %s failed", message.type)
            channel.send(door.ERROR, {"message": f"{message.type} failed: {type(exc).__name__}: {exc}"[:300]})

    def _forget(self, body: dict[str, Any]) -> door.ForgetAnswer:
        uuid = body.get("uuid")
        if not isinstance(uuid, str) or not 0 < len(uuid) <= 96:
            return {"outcome": "unknown", "message": f"not a GPU uuid: {protocol.quote(uuid, 60)}"}
        outcome, message = self.collector.gpu.forget(uuid)
        if outcome == "forgotten":
            self.reporter.forgotten.append(forgotten_event(uuid, "operator", time.time()))
            self._changed.set()  # the record (and the evidence) without it, now
        return {"outcome": outcome, "message": message}  # type: ignore[typeddict-item]

    def _evidence(self, body: dict[str, Any]) -> door.EvidenceAnswer:
        gpus = self.reporter.gathered(self.reporter.kernel_cursor())["gpus"]
        wanted = body.get("uuids")
        if isinstance(wanted, list):
            gpus = {uuid: gpus[uuid] for uuid in wanted[:64] if isinstance(uuid, str) and uuid in gpus}
        return {"gpus": gpus}

    def _users(self, body: dict[str, Any]) -> door.UsersAnswer:
        """Each GPU of the last NVML read with the processes NVML listed on it."""
        wanted = body.get("uuids")
        gpus: dict[str, door.GpuUse] = {}
        for uuid, device in self.remedies.tools.devices().items():
            if isinstance(wanted, list) and uuid not in wanted:
                continue
            processes: list[door.GpuProcess] = [
                {"pid": p.get("pid"), "name": p.get("name"), "container_id": p.get("container_id")}
                for p in device.get("processes") or ()
            ]
            gpus[uuid] = {"index": device["index"], "pci_bus_id": device.get("pci_bus_id"), "processes": processes}
        return {"gpus": gpus, "read": self.collector.gpu.last_section is not None}

    def _capture(self, body: dict[str, Any]) -> door.CaptureAnswer:
        """A serving container died of a hardware cause (the executor): the event's `capture`,
        answered at once; the capture follows (capture/triggers.py)."""
        if not self.config.stall_capture:
            return {"capture": {"id": None, "reason": "captures are off (STALL_CAPTURE)"}}
        return {"capture": self._capture_triggers().died(body)}

    # --- the kernel's lines and the GPU evidence

    def _start_kernel_lines(self) -> None:
        """The kernel's lines, once a GPU was ever seen (its bus id places them): none on a
        machine without NVIDIA GPUs. The inventory worker reads them itself, not the log
        worker: the Xid log lives here, and Loki being down must not delay a verdict."""
        kernel = self.reporter.kernel
        if kernel is not None and not self._kernel_started and self._gpu_machine():
            self._kernel_started = True
            self.start_thread("inventory-kernel-lines", kernel.run, finite=True)

    def _gpu_machine(self) -> bool:
        """NVIDIA GPUs are here: NVML ever saw one, or the last round's topology found one on
        the PCI bus (a driver that did not load, an NVML that fails: the kernel's lines say why,
        and the machine's own conditions are read all the same)."""
        if self._gpus_on_bus or self.collector.gpu.seen:
            return True
        if self.reporter.sections is None:  # the first round (a restart's too): sysfs itself
            self._gpus_on_bus = bool(pci.nvidia_gpus(self.config.sysfs_root))
        else:
            self._gpus_on_bus = bool((self.reporter.sections.get("topology") or {}).get("gpus"))
        return self._gpus_on_bus

    def _kernel_problem(self) -> str | None:
        kernel = self.reporter.kernel
        return kernel.problem if kernel is not None and self._kernel_started else None

    def _restore_gpu_evidence(self) -> tuple[HealthChanges, gpu_evidence.Evidence, KernelLines]:
        """What an earlier run saw of the GPUs (Xids, verdicts, GPUs seen, baselines): the
        health changes and the evidence restored, and the kernel's lines from their cursor."""
        evidence = gpu_evidence.Evidence(self.config.state_dir)
        if evidence.quarantined:
            self.reports.put(protocol.EVENT, evidence.quarantined, record_id=quarantine_record_id(evidence.quarantined))
        changes = HealthChanges()
        gpu_evidence.restore(evidence, self.collector.gpu, changes.verdicts, changes.changes)
        xids = self.collector.gpu.health.xids
        kernel = KernelLines(
            self.stop_event,
            xids.holds.boot_id,
            evidence.kernel_cursor,
            self.config.journal_directory,
            self.config.kmsg_path,
            self._changed.set,
        )
        self.kernel_xids = KernelXids(xids, self.collector.gpu.uuid_of_bus, self._changed.set)
        kernel.add(self.kernel_xids)
        return changes, evidence, kernel

    def _restore_conditions(self, kernel: KernelLines) -> NodeConditions:
        """The node conditions as an earlier run left them (states, the rules' memories), and
        the kernel lines' consumer of theirs from the lines that held."""
        store = ConditionStore(self.config.state_dir)
        if store.quarantined:
            self.reports.put(protocol.EVENT, store.quarantined, record_id=quarantine_record_id(store.quarantined))
        self.kernel_conditions = KernelConditions(
            kernel.boot_id, evaluate.kernel_holds(self.config), self._changed.set, store.memory.get("kernel")
        )
        kernel.add(self.kernel_conditions)
        return NodeConditions(store)

    def _kernel_view(self) -> KernelView | None:
        """The kernel lines' conditions where the lines are read (once a GPU was ever seen: kept
        across restarts, so a restart's first round holds them as the last run did)."""
        kernel = self.reporter.kernel
        if kernel is None or not (self._kernel_started or self._gpu_machine()):
            return None
        return self.kernel_conditions.view(kernel.problem if self._kernel_started else None)

    def _start_traffic(self) -> None:
        """Traffic to peer machines, NICs, RDMA ports (traffic/report.py): a sampling thread,
        and one reading the kernel's TCP destroy notifications when it may."""
        self.traffic = TrafficReporter(
            self.config.state_dir,
            self.config.sysfs_root,
            self.reports.put_latest,
            lambda data, record_id: self.reports.put(protocol.EVENT, data, record_id=record_id),
        )
        if self.traffic.open_listener():
            # finite: when the notifications fail, the records say so and sampling goes on
            self.start_thread("inventory-tcp-closed", self.traffic.listen, self.stop_event, finite=True)
        self.start_thread("inventory-traffic", self.traffic.run, self.stop_event, self.config.traffic_interval_sec)

    def _start_workloads(self) -> None:
        """Forward progress of the managed serving containers (workloads/watcher.py): here,
        not in the executor, whose threads may block only on dockerd; scraping is a periodic
        observation like the other probes, and its status reaches /metrics the same way."""
        client: list[EngineClient] = []

        def list_containers() -> list[dict[str, Any]]:
            if not client:
                client.append(EngineClient(self.config.docker_host, timeout_s=SCRAPE_LIST_TIMEOUT_S))
            return client[0].containers(filters=FILTERS)

        self.workloads = WorkloadWatcher(
            list_containers,
            self._workload_event,
            self.config.workload_scrape_sec,
            self.config.workload_stall_sec,
            self.config.advertise_host or self.config.host,
        )
        self.start_thread("inventory-workloads", self.workloads.run, self.stop_event)

    def _put_event(self, data: dict[str, Any], record_id: str) -> None:
        self.reports.put(protocol.EVENT, data, record_id=record_id)

    def _workload_event(self, data: dict[str, Any], record_id: str) -> None:
        """A stall goes out once its capture is down (STALL_CAPTURE), the rest at once."""
        if data["type"] == STALLED and self.config.stall_capture:
            self._capture_triggers().stalled(data, record_id, self._put_event)
        else:
            self._put_event(data, record_id)

    def _capture_triggers(self) -> Any:
        """Evidence at a stall (capture/): imported at the first capture, never at idle."""
        with self._captures_made:
            if self._captures is None:
                self._captures = self._make_capture_triggers()
            return self._captures

    def _make_capture_triggers(self) -> Any:
        from faden_agent.workers.inventory.capture.capturer import Capturer
        from faden_agent.workers.inventory.capture.triggers import Triggers

        capturer = Capturer(
            self.config.state_dir,
            self.config.stall_capture_max_bytes,
            self.config.workload_fault_window_sec,
            self.config.docker_host,
            self._refresh,
            lambda: self.reporter.sections or {},
            self.start_thread,
        )
        return Triggers(capturer)

    def _refresh(self) -> Callable[[float], tuple[dict[str, Any], bool]]:
        """Asks the collection loop for a full round now; the waiter returns its sections (or,
        past the deadline, the last ones) and whether they are the new ones."""
        before = self.reporter.sections
        self._changed.set()

        def collected(deadline: float) -> tuple[dict[str, Any], bool]:
            while self.reporter.sections is before and time.monotonic() < deadline and not self.stop_event.is_set():
                self.stop_event.wait(0.1)
            return self.reporter.sections or {}, self.reporter.sections is not before

        return collected

    def _collect_loop(self) -> None:
        """A full round every INVENTORY_INTERVAL_SEC and at once after a change; between them
        the GPU probe alone every heartbeat interval, a full round when a verdict moved. An
        earlier run's chain waits for the backend's hello: rounds come soon, then less often."""
        gpu_every = min(self.config.heartbeat_interval_sec, self.config.inventory_interval_sec)
        next_full = 0.0
        hello_wait = Backoff(HELLO_POLL_MIN_S, self.config.inventory_interval_sec, jitter=0.0)
        while not self.stop_event.is_set():
            try:
                if time.monotonic() >= next_full or self.reporter.gpu_moved():
                    next_full = time.monotonic() + self.config.inventory_interval_sec
                    data = self.reporter.report()
                    if data is not None:
                        log.debug("inventory %s record %s", data["type"], data["hash"])
                    if self.reporter.emitter.waiting():
                        next_full = time.monotonic() + hello_wait.next_delay()
            except Exception:  # e.g. the outbox disk is full: try again next time
                log.exception("inventory cycle failed")
            if self.starting:  # the first round's outcome, a failure too, is in the status now
                self.starting = False
                self.alive_now()
            self._start_kernel_lines()
            if self._changed.wait(max(0.0, min(gpu_every, next_full - time.monotonic()))):
                self.stop_event.wait(SETTLE_S)
                self._changed.clear()
                next_full = 0.0

    def status(self) -> InventoryStatus:
        last = self.reporter.last
        status: InventoryStatus = {
            "cycles": self.reporter.cycles,
            # counts and the form in use, not the last record's type: a string that flips
            # every round would make every heartbeat carry the whole detail. The form as the
            # backend's hello set it, not as the last round saw it: a round that ran before the
            # hello would flip it a round later, a detail beat in the idle minutes.
            "records": dict(self.reporter.sent),
            "form": "changes" if ACCEPTS_CHANGES in self.reporter.accepts().accepts else "full",
            "last_age_s": round(time.time() - last["collected_at"], 1) if last else None,
            "overrun": self.collector.overrun(),
            "traffic_samples": self.traffic.samples,
            "traffic_records": self.traffic.sent,
            "kernel_lines": self._kernel_status(),
            "gpu_events": self.gpu_watcher.status(),
            "conditions": self.reporter.conditions.active() if self.reporter.conditions else {},
            "gpu_remedy": self._remedy_status(),
            "gauges": {
                **gauges(self.reporter.sections, self.traffic.last_sample),
                "workloads": self.workloads.gauges(),
            },
            "placement": placement(self.reporter.sections),
            "workloads": self.workloads.status(),
        }
        if self._captures is not None:
            status["captures"] = self._captures.capturer.status()
        return status

    def _remedy_status(self) -> GpuRemedyStatus | None:
        """The check or reset running now (ps, tests); None when none."""
        job = self.remedies.current
        if job is None or job.done:
            return None
        return {"kind": job.kind, "job": job.id}  # steady while it runs: no heartbeat detail per step

    def _kernel_status(self) -> KernelLinesStatus | None:
        """The kernel line source and the Xid lines it brought (ps, tests)."""
        kernel = self.reporter.kernel
        if kernel is None or not self._kernel_started:
            return None
        return {
            **kernel.status(),
            "gpu_lines": self.kernel_xids.read,
            "unplaced": self.kernel_xids.unplaced,
            "condition_lines": self.kernel_conditions.read,
            "cgroup_oom_kills": self.kernel_conditions.cgroup_oom_kills,
        }

    def teardown(self) -> None:
        self._changed.set()
        self.remedies.stop()
        for watcher in self.watchers:
            watcher.stop()
        if self.reporter.kernel is not None:
            self.reporter.kernel.stop()  # ends its journalctl
        self.traffic.stop()  # its listener blocks in the kernel until woken
        self.join_threads()
        self.reports.close()
