"""The capabilities this build reports (enroll, hello's answer, heartbeats): the first
release's, then one `Capability` per later addition, naming the command kinds and spec keys it
brought, so a backend sends nothing an older agent would refuse. Declare a new kind or key here:
tests/unit/executor/test_capabilities_declared.py compares these with the executor's registry,
and `python -m faden_agent.cli.capabilities_table --write docs/protocol.md` renders the table."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

# The first release: 0.1.0 as first built (commit 6cfffa8, 2026-11-30). Any agent takes these.
FIRST_RELEASE = "0.1.0 (6cfffa8, 2026-11-30)"
FIRST_RELEASE_CAPABILITIES = ("docker", "gpu", "logs.loki", "logs.backend_push", "inventory.delta")
_TARGET = ("name", "adopt", "deadline_s")
FIRST_RELEASE_KINDS: dict[str, tuple[str, ...]] = {
    "image.pull": ("image", "auth", "deadline_s"),
    "image.remove": ("image", "force", "deadline_s"),
    "container.run": (
        *("name", "image", "command", "entrypoint", "env", "labels", "gpus", "ports", "mounts"),
        *("network_mode", "ipc_mode", "shm_size", "ulimits", "restart_policy", "healthcheck", "devices"),
        *("cluster", "workload", "ray", "auth", "pull", "replace", "user", "working_dir", "privileged"),
        *("adopt", "deadline_s"),
    ),
    "container.stop": (*_TARGET, "timeout_s"),
    "container.start": _TARGET,
    "container.restart": (*_TARGET, "timeout_s"),
    "container.remove": (*_TARGET, "force", "volumes"),
    "command.cancel": ("command_id",),
}


# The names the reference backend asks about.
TRAFFIC_CAPABILITY = "traffic.passive"
PEER_IMAGES_CAPABILITY = "images.peer"
PROBE_CAPABILITY = "traffic.probe"
DRAIN_CAPABILITY = "drain"
GPU_FORGET_CAPABILITY = "gpu.forget"
GPU_CHECK_CAPABILITY = "gpu.check"
GPU_RESET_CAPABILITY = "gpu.reset"


# No kind or key (read only: one mapping shared by every capability that brought none).
NOTHING: Mapping[str, tuple[str, ...]] = MappingProxyType({})


class Capability(NamedTuple):
    name: str
    since: str  # the agent version (faden_agent.__version__) of the commit that brought it
    commit: str  # that commit and its day: the version was not raised between them
    means: str  # docs/protocol.md's words: what an agent that reports it does or takes
    kinds: Mapping[str, tuple[str, ...]] = NOTHING  # new kinds, with the keys they came with
    keys: Mapping[str, tuple[str, ...]] = NOTHING  # new keys of kinds older than it


DECLARED = (
    Capability(
        TRAFFIC_CAPABILITY,
        "0.1.0",
        "a9aae5c, 2026-11-30",
        "sends `traffic` records (peer machines, NICs, RDMA ports)",
    ),
    Capability(
        PEER_IMAGES_CAPABILITY,
        "0.1.0",
        "3292808, 2026-11-30",
        "fetches images from peer machines and serves its own on `PEER_PORT` (the inventory's `host.peer_port`)",
        kinds={
            "image.serve": ("image_id", "ticket_sha256", "receiver", "ttl_s"),
            "image.fetch": ("image_id", "peers", "image", "deadline_s"),
        },
        keys={"image.pull": ("image_id", "peers"), "container.run": ("image_id", "peers")},
    ),
    Capability(
        "images.relay",
        "0.1.0",
        "db0d054, 2026-11-30",
        "sends an image to a receiver through the backend's relay",
        kinds={"image.relay": ("url", "token", "image_id", "deadline_s")},
    ),
    Capability(
        "heartbeat.delta",
        "0.1.0",
        "fb0a7d9, 2026-11-30",
        "heartbeats carry the worker table and version only when they changed, at least every `HEARTBEAT_FULL_SEC`",
    ),
    Capability(
        PROBE_CAPABILITY,
        "0.1.0",
        "f8db122, 2026-11-30",
        "runs active probes over the peer port",
        kinds={
            "traffic.serve": ("tickets", "ttl_s"),
            "traffic.probe": ("peers", "duration_s", "max_bytes", "round_trips", "deadline_s"),
        },
    ),
    Capability(
        "images.prune",
        "0.1.0",
        "4d96396, 2026-12-02",
        "removes every image no container uses, keeping the names given",
        kinds={"image.prune": ("keep", "deadline_s")},
    ),
    Capability(
        "container.remove_timeout",
        "0.1.0",
        "08e65f3, 2026-12-02",
        "`container.remove` takes the stop grace `timeout_s`",
        keys={"container.remove": ("timeout_s",)},
    ),
    Capability(
        "container.host_policy",
        "0.1.0",
        "1701ec0, 2026-12-02",
        "`container.run` is judged by the host policy: `cap_add`, and `privileged` where the policy allows it"
        " (refused always before)",
        keys={"container.run": ("cap_add",)},
    ),
    Capability(
        "images.size_bound",
        "0.1.0",
        "b79e38d, 2026-12-02",
        "an image from peers is bounded by the backend's `size_bytes`",
        keys={"image.pull": ("size_bytes",), "image.fetch": ("size_bytes",), "container.run": ("size_bytes",)},
    ),
    Capability(
        DRAIN_CAPABILITY,
        "0.1.0",
        "e54ef1e, 2026-12-03",
        "cordon and drain: host requests from the machine, the drain state in heartbeats",
        kinds={
            "node.drain": ("containers", "stop", "remove", "request_id", "deadline_s"),
            "node.undrain": ("request_id", "deadline_s"),
        },
    ),
    Capability(
        "node.shutdown_notice",
        "0.1.0",
        "e54ef1e, 2026-12-03",
        "reports `node.shutting_down` when logind announces a shutdown, then ships the last lines",
    ),
    Capability(
        "workloads.metrics",
        "0.1.0",
        "0202652, 2026-12-03",
        "scrapes a serving container's metrics port and reports `workload.stalled`",
        keys={"container.run": ("metrics_port", "metrics_path")},
    ),
    Capability(
        "events.death_cause",
        "0.1.0",
        "eb990e4, 2026-12-03",
        "container deaths, OOMs and unhealthy states carry their GPUs and `suspected` (hardware or application)",
    ),
    Capability(
        "gpu.catalogue_verdicts",
        "0.1.0",
        "30c6ce2, 2026-12-03",
        "GPU verdicts held until the Xid catalogue's remedy (a reset of that GPU, a reboot), `gpu.replaced` events;"
        " death causes by the catalogue, on the GPUs the container used, with `rule`, `gpus_from` and `xids`",
    ),
    Capability(
        GPU_FORGET_CAPABILITY,
        "0.1.0",
        "30c6ce2, 2026-12-03",
        "acknowledges a GPU removed for good, also as a host request (`faden-agent gpu forget`): no longer missing",
        kinds={"gpu.forget": ("uuid", "request_id", "deadline_s")},
    ),
    Capability(
        GPU_CHECK_CAPABILITY,
        "0.1.0",
        "ea37c48, 2026-12-03",
        "checks GPUs by DCGM's diagnostic, else NVML's own checks, also as a host request (`faden-agent gpu check`);"
        " a busy GPU refused unless `allow_busy`, and then never failed",
        kinds={"gpu.check": ("gpus", "level", "time_limit_s", "allow_busy", "request_id", "deadline_s")},
    ),
    Capability(
        GPU_RESET_CAPABILITY,
        "0.1.0",
        "ea37c48, 2026-12-03",
        "resets one GPU (`nvidia-smi --gpu-reset`), stopping only the containers on it when asked, then checks it;"
        " also as a host request (`faden-agent gpu reset UUID`)",
        kinds={"gpu.reset": ("gpu", "stop_containers", "request_id", "deadline_s")},
    ),
    Capability(
        "node.conditions",
        "0.1.0",
        "f486680, 2026-12-03",
        "reports node conditions (the inventory's `conditions`, `node.condition_changed` events): read-only file"
        " systems, InfiniBand ports, data links, the clock, NVIDIA's persistence daemon and fabric manager, the"
        " kernel's lines (hung tasks, lockups, hardware errors, OOM kills)",
    ),
    Capability(
        "node.placement",
        "0.1.0",
        "f486680, 2026-12-03",
        "sends the operator's labels and its topology (NUMA, PCIe switches, InfiniBand subnets and GUIDs, NVLink"
        " cliques, GPUDirect pairs) at enrollment and in the inventory",
    ),
)

CAPABILITIES = FIRST_RELEASE_CAPABILITIES + tuple(c.name for c in DECLARED)


def declared_pairs() -> dict[tuple[str, str | None], str]:
    """(kind, key) -> the first release or the capability that brought it; (kind, None) is the kind."""
    pairs: dict[tuple[str, str | None], str] = {}
    for kind, keys in FIRST_RELEASE_KINDS.items():
        pairs[(kind, None)] = FIRST_RELEASE
        pairs.update({(kind, key): FIRST_RELEASE for key in keys})
    for capability in DECLARED:
        for kind, keys in capability.kinds.items():
            pairs[(kind, None)] = capability.name
            pairs.update({(kind, key): capability.name for key in keys})
        for kind, keys in capability.keys.items():
            pairs.update({(kind, key): capability.name for key in keys})
    return pairs
