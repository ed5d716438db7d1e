"""The agent's metric families, each declared once: name, type, labels, HELP, the words of
docs/service.md's table (rendered by cli/metrics_table.py, held by a test), and the `field` of
the worker status the supervisor reads it from (supervisor/metrics/). Names are without
`faden_agent_` and a counter's `_total`; labels come from bounded sets; a state label's words
are a list here, never read out of a sentence."""

from __future__ import annotations

from typing import NamedTuple

from faden_agent.protocol.conditions import NODE_CONDITIONS
from faden_agent.protocol.link import LINK_STATES

PREFIX = "faden_agent_"
TYPES = ("counter", "gauge", "histogram", "info")
GPU_VERDICTS = ("ok", "degraded", "failed")
TARGET_STATES = ("resolving", "ok", "failing")  # the logs worker's target_state
SCRAPE_OUTCOMES = ("ok", "unreachable", "timeout", "too_large", "http_status", "not_metrics", "no_endpoint")
MAX_ITEMS = 64  # items of a list read per family (GPUs, containers, peers): a bounded label set
# GPU activity from NVML's GPM (Hopper and later), as DCGM's profiling fields name it (0..1).
GPM = {
    "sm_active": "Share of SMs busy (DCGM's SM active)",
    "sm_occupancy": "Resident warps against the SMs' maximum (DCGM's SM occupancy)",
    "tensor_active": "Share of time the tensor cores were busy (DCGM's tensor active)",
    "dram_active": "Share of the DRAM bandwidth used (DCGM's DRAM active)",
}
GPM_DOC = ", between two GPU probe rounds, where the GPU has GPM ([inventory.md](inventory.md#gpu-activity-gpm))"


class Metric(NamedTuple):
    """One family. `field` is a dotted path into the status of `source` (a worker's name, or
    `inventory.gauges`): `a.b` a number; `a.*.b` one sample per key of `a`, the key its last
    label; `a[].b` one sample per item of the list `a`, the leading labels read from the item's
    keys `item_labels`; with `states`, the word found there marks one of them 1 (the last
    label names it). No field: the supervisor's own producer fills it."""

    name: str
    type: str
    help: str
    labels: tuple[str, ...] = ()
    doc: str = ""  # the docs table's words when HELP alone says too little
    source: str = ""  # "": the supervisor's own table
    field: str = ""
    states: tuple[str, ...] = ()
    item_labels: tuple[str, ...] = ()  # the item keys behind the leading labels (default: the labels)
    absent: float | None = None  # the value when the field is missing, or each state's (None: no sample)
    scale: float = 1.0
    flag: bool = False  # the field is true or false: 1 or 0
    info_keys: tuple[str, ...] = ()  # an info family's labels beside `labels`
    deprecated: str = ""  # the new family this old name stays beside for one release

    @property
    def exposed(self) -> str:
        """The family's name as a scrape shows it (text format 0.0.4)."""
        return PREFIX + self.name + {"counter": "_total", "info": "_info"}.get(self.type, "")


def _gpu(name: str, type_: str, help_: str, field: str, *extra: str, doc: str = "", **kw) -> Metric:
    """A per-GPU family: labelled by index and UUID (an index moves across reboots; a UUID does not)."""
    return Metric(
        name,
        type_,
        help_,
        ("gpu", "uuid", *extra),
        doc=doc,
        source="inventory.gauges",
        field="gpu.devices[]." + field,
        item_labels=("index", "uuid"),
        **kw,
    )


METRICS: tuple[Metric, ...] = (
    # The supervisor's own.
    Metric(
        "build",
        "info",
        "The agent's version, protocol, Python and machine",
        doc="1",
        info_keys=("version", "protocol", "python", "implementation", "arch"),
    ),
    Metric("start_time_seconds", "gauge", "When the supervisor started (Unix time)"),
    Metric(
        "worker_state",
        "gauge",
        "1 for the state each worker is in",
        ("worker", "state"),
        doc="1 for the worker's state (STOPPED, STARTING, RUNNING, HUNG, BACKOFF, STOPPING, EXITED, FATAL;"
        " HUNG: silent past the hang timeout, its traceback dumped, SIGKILL due)",
    ),
    Metric("worker_restarts", "counter", "Times the supervisor restarted it", ("worker",)),
    Metric(
        "worker_last_exit",
        "gauge",
        "1 for the cause of its last exit (none: never exited)",
        ("worker", "cause"),
        doc="1 for the cause of its last exit: none, exit_N, signal_SIGx, hung, thread_died",
    ),
    Metric(
        "worker_liveness_age_seconds",
        "gauge",
        "Seconds since the worker's last liveness message; its figures here are as old",
        ("worker",),
    ),
    Metric(
        "process_cpu_seconds",
        "counter",
        "CPU time of each agent process",
        ("process",),
        doc="CPU time of the supervisor and each worker, read at most every 5 s (a scrape sooner, or at once"
        " when a process came or went, sees the last read)",
    ),
    Metric(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory per process",
        ("process",),
        doc="RSS of the supervisor and each worker, read as the CPU time is",
    ),
    Metric(
        "process_proportional_memory_bytes",
        "gauge",
        "PSS per process (shared pages split): they sum",
        ("process",),
        doc="PSS of the supervisor and each worker (they sum to the tree's), read every 5 min"
        " (the kernel walks every page for it)",
    ),
    Metric("metrics_connections_dropped", "counter", "Connections to this endpoint closed early: too many were open"),
    Metric("metrics_answers", "counter", "Requests this endpoint answered (any path)"),
    Metric(
        "metrics_held_seconds",
        "counter",
        "Time this endpoint stopped accepting: its answer budget was spent",
        doc="Time this endpoint stopped accepting because its budget (`metrics_answer_budget` a second) was spent:"
        " connections waited in the kernel's queue meanwhile, those beyond it were refused there",
    ),
    Metric("metrics_answer_budget", "gauge", "Requests a second this endpoint answers at most, whoever asks"),
    # The stream worker: the backend link and the outbox.
    Metric(
        "link_state",
        "gauge",
        "1 for the backend link's state",
        ("state",),
        source="stream",
        field="link.state",
        states=LINK_STATES,
        absent=0.0,  # no word yet (the stream worker silent): every state 0, and a link-down alert fires
        doc="1 for the backend link's state (`faden-agent status`'s connection)",
    ),
    Metric(
        "link_last_contact_timestamp_seconds",
        "gauge",
        "Last exchange with the backend (Unix time)",
        source="stream",
        field="link.last_contact_at",
    ),
    Metric(
        "link_reconnects",
        "counter",
        "Stream connections after the first",
        source="stream",
        field="link.reconnects",
        absent=0.0,
    ),
    Metric(
        "link_stale_commands",
        "counter",
        "Commands at or below the cursor, not run again",
        source="stream",
        field="link.stale_commands",
        absent=0.0,
    ),
    Metric(
        "link_epoch_resets",
        "counter",
        "Cursor resets because the backend's epoch changed",
        source="stream",
        field="link.epoch_resets",
        absent=0.0,
    ),
    Metric(
        "outbox_records",
        "gauge",
        "Records waiting in the outbox for the backend",
        source="stream",
        field="outbox.records",
    ),
    Metric(
        "outbox_oldest_record_age_seconds",
        "gauge",
        "Age of the oldest waiting durable record",
        source="stream",
        field="outbox.oldest_age_s",
    ),
    # The executor.
    Metric(
        "commands_received",
        "counter",
        "Commands the executor received",
        ("kind",),
        source="executor",
        field="commands.received.*",
        doc="commands the executor received (unknown kinds: `other`)",
    ),
    Metric(
        "commands_ended",
        "counter",
        "Commands that reached a terminal state",
        ("kind", "state", "reason"),
        source="executor",
        doc="terminal states (reasons from the protocol's list, else `other`)",
    ),
    Metric("commands_running", "gauge", "Commands running in the executor now", source="executor", field="running"),
    Metric("commands_queued", "gauge", "Commands queued in the executor now", source="executor", field="queued"),
    # The logs worker.
    Metric(
        "log_lines_read",
        "counter",
        "Log lines read, per source",
        ("source",),
        source="logs",
        field="sources.*.lines_read",
    ),
    Metric(
        "log_lines_shipped",
        "counter",
        "Log lines Loki stored, per source",
        ("source",),
        source="logs",
        field="sources.*.lines_shipped",
    ),
    Metric(
        "log_lines_refused",
        "counter",
        "Log lines Loki refused, per source",
        ("source",),
        source="logs",
        field="sources.*.lines_refused",
        doc="log lines Loki refused, per source (where the source counts them)",
    ),
    Metric(
        "log_lines_lost",
        "counter",
        "Log lines lost before they were shipped, per source",
        ("source",),
        source="logs",
        field="sources.*.lines_lost",
        doc="log lines lost before they were shipped, per source (where the source counts them)",
    ),
    Metric("log_pushed_lines", "counter", "Log lines Loki stored, all sources", source="logs", field="lines_shipped"),
    Metric(
        "log_rejected_lines",
        "counter",
        "Log lines Loki refused (HTTP 400), all sources",
        source="logs",
        field="lines_rejected",
    ),
    Metric(
        "log_too_large_lines",
        "counter",
        "Log lines Loki refused as too large (HTTP 413)",
        source="logs",
        field="lines_too_large",
    ),
    Metric(
        "log_pushed_bytes",
        "counter",
        "Bytes of push bodies sent to the log target",
        source="logs",
        field="bytes_pushed",
    ),
    Metric("log_batches", "counter", "Batches pushed", source="logs", field="batches"),
    Metric(
        "log_push_retries",
        "counter",
        "Pushes retried (429, 5xx, no answer), by answer",
        ("status",),
        source="logs",
        field="push_retries_by_status.*",
        absent=0.0,
        doc="retried pushes by Loki's answer: 429, 4xx, 5xx, no_answer (`sum()` over status: every retry)",
    ),
    Metric(
        "log_push_retries_by_status",
        "counter",
        "Deprecated, removed after 0.2: log_push_retries_total",
        ("status",),
        source="logs",
        field="push_retries_by_status.*",
        absent=0.0,
        deprecated="log_push_retries",
    ),
    Metric("log_backlog_lines", "gauge", "Log lines read and not yet pushed", source="logs", field="backlog_lines"),
    Metric("log_push_duration_seconds", "histogram", "Time of one push to the log target", source="logs"),
    Metric(
        "log_target_state",
        "gauge",
        "1 for the log target's state",
        ("state",),
        source="logs",
        field="target_state",
        states=TARGET_STATES,
        doc="1 for resolving (asking the backend where to push), ok, failing (the last push failed)",
    ),
    # The peer worker (and the executor's fetches).
    Metric(
        "peer_served_bytes",
        "counter",
        "Image bytes this machine served to peers",
        source="peer",
        field="bytes_sent",
        absent=0.0,
    ),
    Metric(
        "peer_fetched_bytes",
        "counter",
        "Image bytes this machine fetched from peers",
        source="executor",
        field="commands.peer_bytes_fetched",
        absent=0.0,
        doc="image bytes fetched from peers (by `image.fetch`, `image.pull` falling back to peers, or"
        " `container.run` fetching its image; counted when a transfer completes)",
    ),
    Metric(
        "peer_transfers",
        "counter",
        "Peer image transfers by direction and outcome",
        ("direction", "outcome"),
        source="peer",
        doc="served: ok; fetched: the `image.fetch` reason",
    ),
    Metric(
        "peer_unauthenticated_connections",
        "gauge",
        "Connections to the peer port that have shown no ticket yet",
        source="peer",
        field="connections.waiting",
        doc="connections to the peer port without a whole request head yet (none has shown a ticket)",
    ),
    Metric(
        "peer_unauthenticated_budget",
        "gauge",
        "How many connections without a ticket the peer port keeps, in all and per address",
        ("scope",),
        source="peer",
        field="connections.budget.*",
        doc="`total`: half the descriptors the limit leaves beside the transfers' (at most 4,096, 256 over TLS,"
        " at least 16); `per_address`: a quarter of that, for one source address",
    ),
    Metric(
        "peer_connections_dropped",
        "counter",
        "Connections the peer port dropped before a whole request head, by reason",
        ("reason",),
        source="peer",
        field="connections.dropped.*",
        doc="`budget`, `address_budget`: the least recently active went for a new one past the total or"
        " its address's share; `out_of_descriptors`: the same at the descriptor limit; `timed_out`: no"
        " whole head in time; `refused`: out of descriptors with none to drop, the newest closed",
    ),
    # The inventory: GPUs, containers, workloads, disks, peer traffic.
    Metric(
        "gpu",
        "info",
        "Each GPU's UUID, PCI bus id and model",
        ("gpu",),
        source="inventory.gauges",
        info_keys=("uuid", "pci_bus_id", "name"),
        doc="1 per GPU: join any GPU series on `uuid` to name its bus id and model (an index moves across"
        " reboots and driver reorders; the UUID does not)",
    ),
    _gpu("gpu_memory_size_bytes", "gauge", "GPU memory in all", "memory_total"),
    _gpu(
        "gpu_memory_total_bytes",
        "gauge",
        "Deprecated: gpu_memory_size_bytes",
        "memory_total",
        deprecated="gpu_memory_size_bytes",
    ),
    _gpu("gpu_memory_used_bytes", "gauge", "GPU memory in use", "memory_used"),
    _gpu("gpu_memory_free_bytes", "gauge", "GPU memory free", "memory_free"),
    _gpu(
        "gpu_utilization_ratio",
        "gauge",
        "GPU busy share of the last sample period (0..1)",
        "utilization_gpu",
        scale=0.01,
    ),
    _gpu("gpu_temperature_celsius", "gauge", "GPU temperature", "temperature_c"),
    *(_gpu(f"gpu_{name}_ratio", "gauge", words, name, scale=0.01, doc=words + GPM_DOC) for name, words in GPM.items()),
    *(
        Metric(
            f"gpu_mig_{name}_ratio",
            "gauge",
            words + " (per MIG GPU instance)",
            ("gpu", "uuid", "gpu_instance", "mig_uuid"),
            source="inventory.gauges",
            field=f"gpu.mig[].{name}",
            item_labels=("index", "uuid", "gpu_instance", "mig_uuid"),
            scale=0.01,
            doc=f"`gpu_{name}_ratio` of one MIG GPU instance of the GPU",
        )
        for name, words in GPM.items()
    ),
    _gpu("gpu_power_draw_watts", "gauge", "GPU power draw", "power_draw_w"),
    _gpu(
        "gpu_health",
        "gauge",
        "1 for each GPU's health verdict",
        "verdict",
        "verdict",
        states=GPU_VERDICTS,
        doc="1 for the GPU's health verdict (ok, degraded, failed) when the inventory carries one",
    ),
    Metric(
        "node_gpu_health",
        "gauge",
        "1 for the node's GPU health verdict",
        ("verdict",),
        source="inventory.gauges",
        field="gpu.verdict",
        states=GPU_VERDICTS,
    ),
    _gpu(
        "gpu_xid_errors",
        "counter",
        "Xid events in the GPU's log",
        "errors.xid.*",
        "xid",
        doc="Xids of that code seen on the GPU (NVML events and kernel lines, one Xid counted once), kept"
        " across restarts in gpu-evidence.json: it never decreases",
    ),
    _gpu(
        "gpu_ecc_errors",
        "counter",
        "ECC errors by kind (NVML's counts)",
        "errors.ecc.*",
        "kind",
        doc="NVML's ECC counts: uncorrected_volatile, uncorrected_aggregate, corrected_volatile, corrected_aggregate",
    ),
    _gpu(
        "gpu_retired_pages",
        "counter",
        "Pages retired by cause",
        "errors.retired_pages.*",
        "cause",
        doc="pages retired (single_bit, double_bit)",
    ),
    _gpu(
        "gpu_remapped_rows",
        "counter",
        "Rows remapped by kind",
        "errors.remapped_rows.*",
        "kind",
        doc="rows remapped (correctable, uncorrectable)",
    ),
    _gpu(
        "gpu_nvlink_errors",
        "counter",
        "NVLink errors summed over links, by counter",
        "errors.nvlink.*",
        "counter",
        doc="NVLink errors summed over links (replay, recovery, crc_flit, crc_data)",
    ),
    _gpu("gpu_pcie_replays", "counter", "PCIe replays", "errors.pcie_replay"),
    _gpu(
        "gpu_clock_event_active_seconds",
        "gauge",
        "How long each clock event has been active",
        "errors.clock_events_s.*",
        "event",
        doc="how long each active clock event (throttle reason) has been active",
    ),
    Metric(
        "container_gpu_memory_used_bytes",
        "gauge",
        "GPU memory of its processes",
        ("container", "gpu", "uuid"),
        source="inventory.gauges",
        field="containers_gpu[].used_memory",
        item_labels=("container", "index", "uuid"),
        doc="per managed container (its name) and GPU: memory of its GPU processes; see [inventory.md](inventory.md)",
    ),
    Metric(
        "container_gpu_utilization_ratio",
        "gauge",
        "SM share of its processes (NVML's per-process samples)",
        ("container", "gpu", "uuid"),
        source="inventory.gauges",
        field="containers_gpu[].utilization_sm",
        item_labels=("container", "index", "uuid"),
        scale=0.01,
        doc="per managed container and GPU: the SM share of its processes (where NVML samples processes)",
    ),
    Metric(
        "workload_stalled",
        "gauge",
        "1 while requests wait or run and no progress counter moves",
        ("container",),
        source="inventory.gauges",
        field="workloads[].stalled",
        flag=True,
        doc="1 while a serving container with a `metrics_port` has requests waiting or running and no progress"
        " counter moved for `WORKLOAD_STALL_SEC` (docs/commands.md, Forward progress)",
    ),
    Metric(
        "workload_scrape",
        "gauge",
        "1 for the outcome of the last scrape of its metrics port",
        ("container", "outcome"),
        source="inventory.gauges",
        field="workloads[].scrape",
        states=SCRAPE_OUTCOMES,
        doc="1 for the outcome of the last scrape of its metrics port: " + ", ".join(SCRAPE_OUTCOMES),
    ),
    Metric(
        "node_condition",
        "gauge",
        "1 while the node condition holds, 0 while it does not",
        ("condition",),
        source="inventory.gauges",
        field="conditions.*.active",
        doc="1 while the node condition holds, 0 while it does not, per condition the inventory checks here"
        " (" + ", ".join(NODE_CONDITIONS) + "; none while unknown: see"
        " [inventory.md](inventory.md#node-conditions))",
    ),
    Metric(
        "disk_free_bytes",
        "gauge",
        "Free bytes per watched path",
        ("path", "role"),
        source="inventory.gauges",
        field="disks[].free",
        doc="free bytes per watched path (state, docker, root, `FADEN_NODE_AGENT_DISK_PATHS`)",
    ),
    Metric(
        "disk_size_bytes",
        "gauge",
        "Size of each watched path's file system",
        ("path", "role"),
        source="inventory.gauges",
        field="disks[].total",
    ),
    Metric(
        "peer_traffic_sent_bytes",
        "counter",
        "TCP bytes sent to each peer machine",
        ("peer",),
        source="inventory.gauges",
        field="peers[].sent_bytes",
        doc="TCP bytes sent to each peer machine the backend named (its node id)",
    ),
    Metric(
        "peer_traffic_received_bytes",
        "counter",
        "TCP bytes received from each peer machine",
        ("peer",),
        source="inventory.gauges",
        field="peers[].received_bytes",
    ),
    Metric(
        "peer_rtt_seconds",
        "gauge",
        "Mean smoothed TCP RTT to each peer machine",
        ("peer",),
        source="inventory.gauges",
        field="peers[].rtt_ms",
        scale=1e-3,
    ),
)

BY_NAME = {metric.name: metric for metric in METRICS}
