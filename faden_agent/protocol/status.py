"""The workers' statuses as types: what each worker's status() returns (sent in its liveness
message, shown by ps, read by /metrics through each Metric's `field`), and the command hand-off
and ack the stream and executor workers exchange. One TypedDict per worker, its parts beside
it; a field a metric reads is declared here (tests/unit/supervisor/test_metrics_fields.py).
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

# --- the stream worker


class LinkCounters(TypedDict, total=False):
    """What the link notes beside its state (LinkStatus.note)."""

    reconnects: int
    stale_commands: int
    below_cursor_run: int
    epoch_resets: int
    shutting_down: bool
    running_version: str
    expected_version: str | None
    missing_capabilities: list[str]


class LinkSnapshot(LinkCounters):
    state: str  # a LinkState word
    since: float
    backend_url: str
    node_id: str | None
    last_contact_at: float | None
    last_error: str | None
    last_error_at: float | None
    pid: int


class OutboxFigures(TypedDict):
    records: int
    oldest_age_s: float


class StreamStatus(TypedDict):
    link: LinkSnapshot
    outbox: NotRequired[OutboxFigures]
    shutdown: NotRequired[str]  # "reporting", then "ready": the machine goes down


# --- the executor worker, and the hand-off the stream worker makes to it


class QueueCounts(TypedDict):
    running: int
    queued: int


class CommandCounts(TypedDict):
    received: dict[str, int]  # kind -> commands
    ended: dict[str, dict[str, dict[str, int]]]  # kind -> state -> reason -> commands
    peer_bytes_fetched: int


class ExecutorStatus(QueueCounts):
    docker: str  # unknown, ok, unreachable
    events: bool
    commands: CommandCounts


class CommandHandOff(TypedDict):
    """A command the downlink hands to the executor ("command")."""

    id: str
    seq: int
    kind: str
    spec: object
    deadline: float | int | None
    too_large: NotRequired[int]  # its measured size: the spec was left out


class CommandAck(TypedDict):
    """The executor's answer ("ack"): journaled (accepted), or why not."""

    id: str | None
    accepted: bool
    duplicate: bool
    reason: NotRequired[str]
    message: NotRequired[str]


# --- the inventory worker


class GpuErrors(TypedDict, total=False):
    xid: dict[str, int]  # code -> Xids
    ecc: dict[str, int]
    retired_pages: dict[str, int]
    remapped_rows: dict[str, int]
    nvlink: dict[str, int]
    pcie_replay: int
    clock_events_s: dict[str, float]


class GpuDeviceGauges(TypedDict, total=False):
    index: int
    state: str
    verdict: str
    uuid: str
    pci_bus_id: str
    name: str
    memory_total: int
    memory_used: int
    memory_free: int
    utilization_gpu: float
    temperature_c: float
    power_draw_w: float
    sm_active: float  # GPM's activity figures (percent), where the GPU has GPM
    sm_occupancy: float
    tensor_active: float
    dram_active: float
    errors: GpuErrors


class GpuMigGauges(TypedDict, total=False):
    """One MIG GPU instance's GPM figures (percent)."""

    index: int  # its GPU's
    uuid: str  # its GPU's
    mig_uuid: str
    gpu_instance: int
    sm_active: float
    sm_occupancy: float
    tensor_active: float
    dram_active: float


class GpuGauges(TypedDict, total=False):
    available: bool
    verdict: str
    devices: list[GpuDeviceGauges]
    mig: list[GpuMigGauges]


class ContainerGpuGauges(TypedDict, total=False):
    container: str
    index: int
    uuid: str
    used_memory: int
    utilization_sm: float


class DiskGauges(TypedDict, total=False):
    path: str
    role: str
    free: int
    total: int


class PeerGauges(TypedDict, total=False):
    peer: str
    sent_bytes: int
    received_bytes: int
    rtt_ms: float


class WorkloadGauges(TypedDict):
    container: str
    scrape: str | None
    stalled: bool


class ConditionGauge(TypedDict):
    active: int  # 1 active, 0 inactive (an unknown condition is left out)


class MachineGauges(TypedDict):
    containers_gpu: list[ContainerGpuGauges]
    gpu: GpuGauges
    disks: list[DiskGauges]
    peers: list[PeerGauges]
    conditions: dict[str, ConditionGauge]  # by node condition (protocol/conditions.py)


class InventoryGauges(MachineGauges):
    """The figures /metrics reads (source `inventory.gauges`)."""

    workloads: list[WorkloadGauges]


class KernelSourceStatus(TypedDict):
    source: str | None  # the one read now (journald, kmsg)
    problem: str | None  # why no kernel line can be read
    note: str | None  # what went wrong last without stopping the reading
    lines: int
    consumer_errors: dict[str, int]  # consumer -> lines it raised on


class KernelLinesStatus(KernelSourceStatus):
    gpu_lines: int  # the Xid (and SXid) lines among them
    unplaced: int  # Xid lines whose bus id is no GPU this agent has seen
    condition_lines: int  # lines that named a node condition
    cgroup_oom_kills: int  # the OOM killer inside one cgroup: its container's event, no node condition


class GpuEventsStatus(TypedDict):
    watching: list[int]  # GPU indexes in NVML's event set
    lost: list[int]
    unwatched: dict[str, str]  # index -> why not
    hung: str | None  # the NVML call past its bound
    error: str | None
    let_go: bool  # NVML let go for a reset (gpu.reset)


class GpuRemedyStatus(TypedDict):
    """The check or reset running now (workers/inventory/gpu/remedies.py)."""

    kind: str  # gpu.check, gpu.reset
    job: str


class WorkloadStatus(TypedDict):
    cluster: str | None
    workload: str | None
    scrape: str | None
    message: str | None
    engine: str | None
    stalled: bool | None
    endpoint: dict[str, str] | None


class WorkloadsStatus(TypedDict):
    rounds: int
    list_error: str | None
    containers: dict[str, WorkloadStatus]  # by container name


class CaptureLast(TypedDict):
    id: str
    bytes: int | None  # of its Loki line; None: it failed
    stacks: str | None
    error: str | None
    seconds: float


class CapturesStatus(TypedDict):
    """Evidence at a stall (workers/inventory/capture/): there once a capture was asked for."""

    taken: int
    queued: int
    last: CaptureLast | None


class Placement(TypedDict):
    """Where the machine stands, in a few figures (workers/inventory/placement.py)."""

    labels: dict[str, str]
    ib_subnets: list[str]
    gpus: int
    nvlink_cliques: list[int]
    fabric_clusters: list[str]
    rdma_devices: int
    gpudirect_pairs: int


class InventoryStatus(TypedDict):
    cycles: int
    records: dict[str, int]  # records handed to the outbox, by type
    form: str  # changes, full
    last_age_s: float | None
    overrun: list[str]
    traffic_samples: int
    traffic_records: int
    kernel_lines: KernelLinesStatus | None
    gpu_events: GpuEventsStatus
    conditions: dict[str, str | None]  # the active node conditions and their reasons
    gpu_remedy: GpuRemedyStatus | None
    gauges: InventoryGauges
    placement: Placement  # ps only: heartbeats leave it out (stream/heartbeat.py)
    workloads: WorkloadsStatus
    captures: NotRequired[CapturesStatus]


# --- the logs worker


class HistogramSnapshot(TypedDict):
    le: list[float]
    counts: list[int]  # per bucket, not cumulative, +Inf last
    sum: float


class RetentionStatus(TypedDict):
    removed_containers: int
    removed_sessions: int
    lines_lost: int
    orphans: int


class RefusalsStatus(TypedDict):
    refused: dict[str, int]  # reason -> entries
    refused_total: int


class SourceStatus(TypedDict):
    """A log source's own: the common part, then each kind's."""

    lines_read: int
    lines_lost: int
    last_error: str
    restarts: NotRequired[int]  # journal
    entries_cut: NotRequired[int]
    followers: NotRequired[int]  # containers
    lines_cut: NotRequired[int]
    unreadable: NotRequired[int]
    events: NotRequired[int]
    shipped: NotRequired[int]  # captures: taken by Loki and removed
    queued: NotRequired[int]  # captures: in the backlog or a push
    files: NotRequired[int]  # ray-serve
    watching: NotRequired[str | None]
    scans: NotRequired[dict[str, int]]
    nul_bytes_skipped: NotRequired[int]
    closed_idle: NotRequired[int]
    retention: NotRequired[RetentionStatus]
    positions_quarantined: NotRequired[int]
    dirs_opened: NotRequired[int]
    rotations: NotRequired[int]
    truncations: NotRequired[int]
    refused: NotRequired[dict[str, int]]
    refused_total: NotRequired[int]


class ShippedCounts(TypedDict):
    lines_shipped: int
    lines_refused: int


class LogSourceStatus(SourceStatus, ShippedCounts):
    """A source's status with what the shipper counted of its lines."""


class ShipperStatus(TypedDict):
    target: str
    lines_shipped: int
    lines_rejected: int
    lines_too_large: int
    batches: int
    push_retries: int
    push_retries_by_status: dict[str, int]  # 429, 4xx, 5xx, no_answer
    bytes_pushed: int
    push_seconds: HistogramSnapshot
    structured_metadata: bool
    last_rejection: str
    last_push_error: str
    target_state: str  # resolving, ok, failing


class LogsStatus(ShipperStatus):
    backlog_lines: int
    backlog_bytes: int
    backlog_full_waits: int
    sources: dict[str, LogSourceStatus]  # by source kind


# --- the peer worker


class ConnectionBudget(TypedDict):
    total: int
    per_address: int


class ConnectionFigures(TypedDict):
    accepted: int
    waiting: int  # connections without a whole request head yet
    budget: ConnectionBudget
    dropped: dict[str, int]  # reason -> connections dropped before a whole head


class HttpServerStatus(ConnectionFigures):
    workers: int
    busy_refusals: int


class PeerServerStatus(TypedDict):
    transfers_active: int
    transfers_served: int
    bytes_sent: int
    probes_active: int
    probes_served: int
    connections: HttpServerStatus


class PeerStatus(TypedDict):
    listening: bool
    port: int
    error: str | None
    transfers_active: NotRequired[int]  # the server's (PeerServerStatus) while it listens
    transfers_served: NotRequired[int]
    bytes_sent: NotRequired[int]
    probes_active: NotRequired[int]
    probes_served: NotRequired[int]
    connections: NotRequired[HttpServerStatus]


# The status each worker (and /metrics source) sends.
WORKER_STATUS: dict[str, type] = {
    "stream": StreamStatus,
    "executor": ExecutorStatus,
    "inventory": InventoryStatus,
    "logs": LogsStatus,
    "peer": PeerStatus,
}
