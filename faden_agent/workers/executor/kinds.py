"""The one table of command kinds: everything the executor knows about a kind is here.

Each kind is one CommandKind record, registered in KINDS: its spec (required and optional
keys with their checks), its default deadline, the queue it waits in, whether
command.cancel may stop it, whether it runs inline in the worker loop, and its handler.
Dispatch, scheduling and cancellation read these fields; no other module names a kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from faden_agent import protocol
from faden_agent.workers.executor import peer_commands, specs
from faden_agent.workers.executor.commands import Commands
from faden_agent.workers.executor.specs import Check

# The spec's deadline_s or the envelope's deadline win; this is the bound when neither is given.
DEFAULT_DEADLINE_S = 120.0


def by_container(spec: dict[str, Any]) -> str:
    return f"container:{spec['name']}"


def by_image(spec: dict[str, Any]) -> str:
    return f"image:{spec['image']}"


@dataclass(frozen=True)
class CommandKind:
    name: str
    handler: Callable[[Commands, Any], dict[str, Any]]  # (commands, job) -> result, or raises
    required: dict[str, Check]
    optional: dict[str, tuple[Check, Any]] = field(default_factory=dict)
    deadline_s: float = DEFAULT_DEADLINE_S
    queue_key: Callable[[dict[str, Any]], str] | None = None  # None: inline, in the worker loop
    cancellable: bool = False

    @property
    def inline(self) -> bool:
        """Touches no Docker: runs in the worker loop, ahead of every queue."""
        return self.queue_key is None

    def validate(self, spec: Any) -> dict[str, Any]:
        """The normalised spec (defaults filled in, sizes in bytes), or specs.SpecError."""
        return specs.check_spec(self.name, self.required, self.optional, spec)

    def deadline(self, spec: dict[str, Any], envelope_deadline: float | None, received_at: float) -> float:
        """The earliest of the envelope's deadline and the spec's deadline_s; the default otherwise."""
        candidates = [envelope_deadline] if envelope_deadline is not None else []
        if spec.get("deadline_s"):
            candidates.append(received_at + spec["deadline_s"])
        return min(candidates) if candidates else received_at + self.deadline_s


KINDS: dict[str, CommandKind] = {}


def register(kind: CommandKind) -> None:
    KINDS[kind.name] = kind


_COMMON = {"deadline_s": (specs.seconds, None)}
_ADOPT = {"adopt": (specs.boolean, False), **_COMMON}
_TARGET = {"name": specs.name}
# Peers to fetch the image from when the registry fails or lacks it (issue 14).
_PEERS = {"peers": (peer_commands.peers, None), "image_id": (peer_commands.image_id, None)}
_CONTAINER_RUN = {
    "command": (specs.str_list, None),
    "entrypoint": (specs.str_list, None),
    "env": (specs.str_map, {}),
    "labels": (specs.labels, {}),
    "gpus": (specs.gpus, None),
    "ports": (specs.ports, {}),
    "mounts": (specs.mounts, []),
    "network_mode": (specs.string, None),
    "ipc_mode": (specs.string, None),
    "shm_size": (specs.size, None),
    "ulimits": (specs.ulimits, []),
    "restart_policy": (specs.restart_policy, None),
    "healthcheck": (specs.healthcheck, None),
    "devices": (specs.devices, []),
    "cluster": (specs.string, None),
    "workload": (specs.string, None),
    "ray": (specs.boolean, False),
    "auth": (specs.auth, None),
    "pull": (specs.choice("missing", "always", "never"), "missing"),
    "replace": (specs.boolean, False),
    "user": (specs.string, None),
    "working_dir": (specs.string, None),
    **_PEERS,
    "privileged": (specs.refuse("privileged containers are not run by the agent"), None),
    **_ADOPT,
}

register(
    CommandKind(
        "image.pull",
        Commands.image_pull,
        {"image": specs.string},
        {"auth": (specs.auth, None), **_PEERS, **_COMMON},
        deadline_s=1800.0,
        queue_key=by_image,
        cancellable=True,
    )
)
register(
    CommandKind(
        "image.serve",
        peer_commands.image_serve,
        {"image_id": peer_commands.image_id, "ticket_sha256": peer_commands.sha256_hex, "receiver": specs.string},
        {"ttl_s": (specs.seconds, 600.0)},
    )
)
register(
    CommandKind(
        "image.fetch",
        peer_commands.image_fetch,
        {"image_id": peer_commands.image_id, "peers": peer_commands.peers},
        {"image": (specs.string, None), **_COMMON},
        deadline_s=3600.0,
        queue_key=peer_commands.by_fetched_image,
        cancellable=True,
    )
)
register(
    CommandKind(
        "image.relay",
        peer_commands.image_relay,
        {"url": specs.string, "token": specs.string, "image_id": peer_commands.image_id},
        _COMMON,
        deadline_s=3600.0,
        queue_key=peer_commands.by_fetched_image,
        cancellable=True,
    )
)
register(
    CommandKind(
        "image.remove",
        Commands.image_remove,
        {"image": specs.string},
        {"force": (specs.boolean, False), **_COMMON},
        queue_key=by_image,
    )
)
register(
    CommandKind(
        "container.run",
        Commands.container_run,
        {"name": specs.name, "image": specs.string},
        _CONTAINER_RUN,
        deadline_s=900.0,
        queue_key=by_container,
        cancellable=True,
    )
)
register(
    CommandKind(
        "container.stop",
        Commands.container_stop,
        _TARGET,
        {"timeout_s": (specs.count, 10), **_ADOPT},
        queue_key=by_container,
    )
)
register(
    CommandKind("container.start", Commands.container_start, _TARGET, _ADOPT, queue_key=by_container, cancellable=True)
)
register(
    CommandKind(
        "container.restart",
        Commands.container_restart,
        _TARGET,
        {"timeout_s": (specs.count, 10), **_ADOPT},
        queue_key=by_container,
        cancellable=True,
    )
)
register(
    CommandKind(
        "container.remove",
        Commands.container_remove,
        _TARGET,
        {"force": (specs.boolean, True), "volumes": (specs.boolean, False), **_ADOPT},
        queue_key=by_container,
    )
)
register(CommandKind("command.cancel", Commands.command_cancel, {"command_id": specs.string}))

assert set(KINDS) == set(protocol.COMMAND_KINDS), "protocol.COMMAND_KINDS and the executor's table disagree"
