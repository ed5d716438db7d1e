"""Names shared by the agent and the reference backend; docs/protocol.md is the contract.

Record kinds, command kinds, timeline states and reasons live here so both sides and the
tests spell them one way.
"""

from __future__ import annotations

from faden_agent.protocol import capabilities as _capabilities

PROTOCOL_VERSION = 1

# Uplink record kinds.
HEARTBEAT = "heartbeat"
INVENTORY = "inventory"
TIMELINE = "timeline"
EVENT = "event"
TRAFFIC = "traffic"  # latest value: traffic to peer machines, NICs, RDMA ports (docs/protocol.md)
HOST_REQUEST = "host_request"  # an operator on the machine asks: cordon, drain, uncordon (docs/protocol.md)
RECORD_KINDS = (HEARTBEAT, INVENTORY, TIMELINE, EVENT, TRAFFIC, HOST_REQUEST)

# Drain states of a machine, in its heartbeat's `drain` (docs/commands.md, node.drain).
SCHEDULABLE = "schedulable"
CORDONED = "cordoned"  # nothing new is placed here; what runs stays
DRAINING = "draining"  # cordoned, and the managed containers are being stopped
DRAINED = "drained"  # cordoned, and the drain ended
DRAIN_STATES = (SCHEDULABLE, CORDONED, DRAINING, DRAINED)
HOST_ACTIONS = ("cordon", "drain", "uncordon", "gpu.forget", "gpu.check", "gpu.reset")  # what a host request may ask
MAX_DRAIN_DEADLINE_S = 86400.0  # the longest drain a host request may ask for
SHUTTING_DOWN_EVENT = "node.shutting_down"  # the machine is going down (logind PrepareForShutdown)

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

# HTTP paths, spelled once for the agent's client (backend/client.py), the admin client
# (devbackend/admin.py) and the reference backend (devbackend/api_*.py). `{name}` is a path
# parameter: clients fill it with str.format, the reference backend matches it (web.route).
AGENT_API = "/api/agent/v1"
ENROLL_PATH = f"{AGENT_API}/enroll"
STREAM_PATH = f"{AGENT_API}/stream"
UPLINK_PATH = f"{AGENT_API}/uplink"
LOGS_TARGET_PATH = f"{AGENT_API}/logs/target"
LOGS_PUSH_PATH = f"{AGENT_API}/logs/push"  # the backend's own log store, when it names no Loki
PEER_FETCH_PATH = "/v1/images/fetch"  # a holder's peer port (transfers/server.py); also under a relay
PEER_PROBE_PATH = "/v1/traffic/probe"  # an active probe session on a peer port (transfers/probe.py)
RELAY_PATH = f"{AGENT_API}/relays/{{relay_id}}"  # an image relay: the peer address a receiver gets
RELAY_FETCH_PATH = RELAY_PATH + PEER_FETCH_PATH  # the receiver, as at a holder's peer port
RELAY_REQUEST = "/request"  # after a relay's address: the holder asks what the receiver wants
RELAY_STREAM = "/stream"  # after a relay's address: the holder posts the archive
RELAY_REQUEST_PATH = RELAY_PATH + RELAY_REQUEST
RELAY_STREAM_PATH = RELAY_PATH + RELAY_STREAM
DOWNLOADS_PATH = "/downloads/{name}"  # agent builds and install.sh (reference backend --downloads)
EXPECTED_VERSION_PATH = f"{AGENT_API}/expected-version"  # ?arch=: the version installers should put there
LOKI_PUSH_PATH = "/loki/api/v1/push"  # Loki's own push API, after its base URL

# The reference backend's admin API (docs/protocol.md, "Admin API").
ADMIN_API = "/api/admin/system"
ADMIN_ENROLLMENT_TOKENS_PATH = f"{ADMIN_API}/nodes/enrollment-tokens"
ADMIN_NODES_PATH = f"{ADMIN_API}/nodes"
ADMIN_NODE_PATH = f"{ADMIN_API}/nodes/{{node_id}}"
ADMIN_NODE_COMMANDS_PATH = f"{ADMIN_NODE_PATH}/commands"
ADMIN_NODE_VIEW_PATH = f"{ADMIN_NODE_PATH}/{{view}}"  # one of ADMIN_NODE_VIEWS
ADMIN_NODE_CREDENTIAL_PATH = f"{ADMIN_NODE_PATH}/credential"  # POST: rotate the node's credential
ADMIN_EXPECTATIONS_PATH = f"{ADMIN_API}/expectations"  # the version and capabilities nodes should have
ADMIN_NODE_VIEWS = ("events", "heartbeats", "timeline", "inventory", "logs")
ADMIN_COMMAND_PATH = f"{ADMIN_API}/commands/{{command_id}}"
ADMIN_CLUSTER_PATH = f"{ADMIN_API}/clusters/{{cluster}}"
ADMIN_CLUSTER_TRAFFIC_PATH = f"{ADMIN_CLUSTER_PATH}/traffic"
ADMIN_FANOUTS_PATH = f"{ADMIN_CLUSTER_PATH}/fanouts"
ADMIN_FANOUT_PATH = f"{ADMIN_FANOUTS_PATH}/{{fanout_id}}"
ADMIN_PROBES_PATH = f"{ADMIN_CLUSTER_PATH}/probes"  # probe rounds (devbackend/probes.py)
ADMIN_PROBE_PATH = f"{ADMIN_PROBES_PATH}/{{probe_id}}"
ADMIN_RELAYS_PATH = f"{ADMIN_API}/relays"
ADMIN_FAULTS_PATH = f"{ADMIN_API}/faults"
ADMIN_REQUESTS_PATH = f"{ADMIN_API}/requests"
ADMIN_STATS_PATH = f"{ADMIN_API}/stats"

MAX_SEQ = 2**63  # command sequence numbers are below this: SQLite INTEGERs (int64) on both sides

# One size budget, end to end (docs/protocol.md, "Size budget"). Each layer's limit holds
# whatever passed the layer before it, so nothing valid upstream is refused downstream:
#   command line on the stream  <= MAX_STREAM_LINE_BYTES
#   command handed to executor  <= MAX_COMMAND_BYTES  (re-encoded; bigger -> rejected too_large)
#   IPC message                 <= MAX_IPC_MESSAGE_BYTES (a command plus the envelope)
#   one uplink record           <= MAX_RECORD_BYTES   (bigger -> a `truncated` stub)
#   one uplink batch            <= MAX_UPLINK_BATCH_BYTES (413 -> split in halves)
#   one request body            <= MAX_REQUEST_BODY_BYTES (the reference backend's 413)
#   one log line                <= MAX_LOG_LINE_BYTES (cut and marked), one push <= MAX_LOG_PUSH_BYTES
MAX_ID_BYTES = 256  # command and record ids
MAX_SPEC_BYTES = 256 * 1024
MAX_COMMAND_BYTES = MAX_SPEC_BYTES + 4 * 1024  # id, kind, seq, deadline and the JSON around them
MAX_STREAM_LINE_BYTES = 4 * MAX_COMMAND_BYTES  # room to read an over-size command and reject it by id
MAX_IPC_MESSAGE_BYTES = 2 * MAX_COMMAND_BYTES  # the envelope's own fields fit many times over
MAX_RECORD_BYTES = 256 * 1024
MAX_UPLINK_BATCH_BYTES = 4 * 1024 * 1024
MAX_LOG_LINE_BYTES = 64 * 1024
MAX_LOG_PUSH_BYTES = 1024 * 1024  # uncompressed
MAX_REQUEST_BODY_BYTES = 2 * MAX_UPLINK_BATCH_BYTES  # >= every body above; what the backend decompresses at most
MAX_STREAM_INFLATE_RATIO = 100  # a gzip-encoded downlink expanding more than this is a bomb
QUOTE_BYTES = 200  # at most this much of a bad value in any message
MAX_MESSAGE_CHARS = 2000  # a timeline message, whatever it quotes


def quote(value: object, limit: int = QUOTE_BYTES) -> str:
    """repr() of a bad value for a one-line message: at most `limit` characters, the cut said."""
    if isinstance(value, (str, bytes)) and len(value) > 4 * limit:
        value = value[: 4 * limit]  # repr() of a 16 MiB string is never built
    text = repr(value) if not isinstance(value, (dict, list)) or _small(value) else _short_repr(value, limit)
    return text if len(text) <= limit else f"{text[:limit]}...(cut)"


def _small(value: object, budget: int = 64) -> bool:
    """True when a container holds few enough items that repr() of it is cheap."""
    stack = [value]
    while stack:
        budget -= 1
        if budget < 0:
            return False
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, (str, bytes)) and len(item) > 4 * QUOTE_BYTES:
            return False
    return True


def _short_repr(value: dict | list, limit: int) -> str:
    kind = "object" if isinstance(value, dict) else "list"
    return f"<a {kind} of {len(value)} items>"


# Command kinds: the executor's registry (workers/executor/commands/) is the one list; docs/commands.md.

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
    # the NVIDIA container stack's other failures, by cause
    "gpu_driver_mismatch",
    "gpu_driver_not_loaded",
    "gpu_lost",
    "gpu_device_missing",
    "gpu_runtime_failed",
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
    "too_large",
    "poison",
    "internal_error",
    # images from peer machines
    "no_space",
    "integrity_failed",
    "peer_unreachable",
    "peer_failed",
    "ticket_refused",
    "ticket_expired",
    "policy_denied",  # the host policy refuses what a container.run asks for
    "already_ran",  # an id that ran before its journal row expired: not run again
    # gpu.* commands, answered through the inventory worker's door
    "gpu_present",  # gpu.forget of a GPU NVML still counts
    "inventory_unavailable",  # the inventory worker did not answer
    "busy",  # what the command needs is held by another call (a GPU probe in a hung NVML call, a check running)
    "gpu_in_use",  # gpu.check/gpu.reset of a GPU that runs work: the containers and processes named
    "check_failed",  # gpu.check (or the check after gpu.reset) found a GPU failing a test
    "check_error",  # the check could not run (dcgmi failed): not a GPU fault
    "reset_blocked",  # gpu.reset refused before trying: what blocks it (peers, persistence mode) named
    "reset_failed",  # not reset, or NVML did not read it after: the tool's words, the next remedy
)

# Capabilities this build reports to the backend: declared in capabilities.py.
CAPABILITIES = _capabilities.CAPABILITIES
TRAFFIC_CAPABILITY = _capabilities.TRAFFIC_CAPABILITY
PEER_IMAGES_CAPABILITY = _capabilities.PEER_IMAGES_CAPABILITY
PROBE_CAPABILITY = _capabilities.PROBE_CAPABILITY
DRAIN_CAPABILITY = _capabilities.DRAIN_CAPABILITY
GPU_FORGET_CAPABILITY = _capabilities.GPU_FORGET_CAPABILITY
GPU_CHECK_CAPABILITY = _capabilities.GPU_CHECK_CAPABILITY
GPU_RESET_CAPABILITY = _capabilities.GPU_RESET_CAPABILITY


def timeline_data(command_id: str, state: str, **fields: object) -> dict[str, object]:
    """The data of a timeline record; terminal states must carry reason and message."""
    if state not in TIMELINE_STATES:
        raise ValueError(f"unknown timeline state {state!r}")
    if state in TERMINAL_STATES and ("reason" not in fields or "message" not in fields):
        raise ValueError(f"terminal state {state!r} needs a reason and a message")
    message = fields.get("message")
    if isinstance(message, str) and len(message) > MAX_MESSAGE_CHARS:  # e.g. one naming a 200 KiB image
        fields["message"] = f"{message[:MAX_MESSAGE_CHARS]}...(cut)"
    return {"command_id": command_id, "state": state, **fields}


def timeline_record_id(command_id: str, state: str, step: int = 0) -> str:
    """Deterministic ids: a re-emitted state of the same command dedups at the backend."""
    return f"tl:{command_id}:{state}:{step}"


def command_problem(message: object) -> str | None:
    """Why a command's id, seq, kind or deadline is unusable, in one line; None when usable.

    The downlink (before the hand-off) and the executor (before the journal) both ask this,
    so they agree on what a command is (docs/protocol.md, "Commands")."""
    if not isinstance(message, dict):
        return f"a command is a JSON object, not {_value_name(message)}"
    command_id = message.get("id")
    if not isinstance(command_id, str) or not command_id.strip():
        return f"id must be a non-empty string, not {_value_name(command_id)}"
    if not usable_id(command_id):
        size = len(command_id.encode("utf-8", "surrogatepass"))
        return f"id is {size} bytes (over {MAX_ID_BYTES}): {_value_name(command_id[:40])}"
    seq = message.get("seq")
    if type(seq) is not int:  # a bool is an int in Python, and 1.0 is no sequence number
        return f"seq must be an integer, not {_value_name(seq)}"
    if not 0 < seq < MAX_SEQ:
        return f"seq must be from 1 to {MAX_SEQ - 1}, not {_value_name(seq)}"
    kind = message.get("kind")
    if not isinstance(kind, str):
        return f"kind must be a string, not {_value_name(kind)}"
    deadline = message.get("deadline")
    if deadline is not None and type(deadline) not in (int, float):
        return f"deadline must be a number of seconds or null, not {_value_name(deadline)}"
    return None


def usable_id(value: object) -> bool:
    """A non-empty string of at most MAX_ID_BYTES bytes in UTF-8 (as stored and sent; a
    character count lets a 1,024-byte id of 256 characters through)."""
    return (
        isinstance(value, str)
        and bool(value.strip())
        and len(value) <= MAX_ID_BYTES  # cheap first: never encode a huge string
        and len(value.encode("utf-8", "surrogatepass")) <= MAX_ID_BYTES
    )


def _value_name(value: object) -> str:
    """A bad value for a reason: its type and a short quote (a huge int is only measured)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an int of {value.bit_length()} bits"
    return f"{type(value).__name__} {quote(value, 80)}"


# Labels on every container the agent creates (the executor sets them; inventory and the
# log shipper find managed containers by them).
LABEL_MANAGED = "io.fadenstack.managed"  # "true"
MANAGED_FILTER = {"label": f"{LABEL_MANAGED}=true"}  # Docker's filter: the one listing of managed containers
LABEL_AGENT_ID = "io.fadenstack.agent-id"
LABEL_COMMAND_ID = "io.fadenstack.command-id"
LABEL_CLUSTER = "io.fadenstack.cluster"
LABEL_WORKLOAD = "io.fadenstack.workload"
LABEL_RAY = "io.fadenstack.ray"  # "true": a Ray container whose logs dir is on the host
LABEL_METRICS_PORT = "io.fadenstack.metrics-port"  # the spec's metrics_port: scraped for progress
LABEL_METRICS_PATH = "io.fadenstack.metrics-path"  # the spec's metrics_path (default /metrics)

# Ray containers get <RAY_LOG_DIR>/<container name>/ mounted here; Ray Serve then writes
# <RAY_LOG_DIR>/<container name>/session_*/logs/serve/*.log on the host.
RAY_LOG_MOUNT = "/tmp/ray"
