"""Names shared by the agent and the reference backend; docs/protocol.md is the contract.

Record kinds, command kinds, timeline states and reasons live here so both sides and the
tests spell them one way.
"""

from __future__ import annotations

PROTOCOL_VERSION = 1

# Uplink record kinds.
HEARTBEAT = "heartbeat"
INVENTORY = "inventory"
TIMELINE = "timeline"
EVENT = "event"
RECORD_KINDS = (HEARTBEAT, INVENTORY, TIMELINE, EVENT)

# Timeline states of a command.
RECEIVED = "received"
STARTED = "started"
PROGRESS = "progress"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
REJECTED = "rejected"
TERMINAL_STATES = (SUCCEEDED, FAILED, CANCELLED, REJECTED)
TIMELINE_STATES = (RECEIVED, STARTED, PROGRESS) + TERMINAL_STATES

MAX_SEQ = 2**63  # command sequence numbers are below this: SQLite INTEGERs (int64) on both sides

# Command kinds the executor knows.
COMMAND_KINDS = (
    "image.pull",
    "image.remove",
    "container.run",
    "container.stop",
    "container.start",
    "container.restart",
    "container.remove",
    "command.cancel",
)

# Machine-readable reasons of terminal timeline states.
REASONS = (
    "ok",
    "unknown_kind",
    "invalid_spec",
    "image_not_found",
    "registry_unreachable",
    "registry_auth_failed",
    "docker_unavailable",
    "docker_permission",
    "gpu_runtime_missing",
    "conflict",
    "not_managed",
    "not_found",
    "timeout",
    "cancelled",
    "interrupted",
    "docker_error",
    "container_exited",
    "unhealthy",
    "not_implemented",
)

# Capabilities this build reports to the backend.
CAPABILITIES = ("docker", "gpu", "logs.loki", "logs.backend_push", "inventory.delta")


def timeline_data(command_id: str, state: str, **fields: object) -> dict[str, object]:
    """The data of a timeline record; terminal states must carry reason and message."""
    if state not in TIMELINE_STATES:
        raise ValueError(f"unknown timeline state {state!r}")
    if state in TERMINAL_STATES and ("reason" not in fields or "message" not in fields):
        raise ValueError(f"terminal state {state!r} needs a reason and a message")
    return {"command_id": command_id, "state": state, **fields}


def timeline_record_id(command_id: str, state: str, step: int = 0) -> str:
    """Deterministic ids: a re-emitted state of the same command dedups at the backend."""
    return f"tl:{command_id}:{state}:{step}"

# Labels on every container the agent creates (the executor sets them; inventory and the
# log shipper find managed containers by them).
LABEL_MANAGED = "io.fadenstack.managed"  # "true"
LABEL_AGENT_ID = "io.fadenstack.agent-id"
LABEL_COMMAND_ID = "io.fadenstack.command-id"
LABEL_CLUSTER = "io.fadenstack.cluster"
LABEL_WORKLOAD = "io.fadenstack.workload"
LABEL_RAY = "io.fadenstack.ray"  # "true": a Ray container whose logs dir is on the host

# Ray containers get <RAY_LOG_DIR>/<container name>/ mounted here; Ray Serve then writes
# <RAY_LOG_DIR>/<container name>/session_*/logs/serve/*.log on the host.
RAY_LOG_MOUNT = "/tmp/ray"
