"""The container.* kinds: run, stop, start, restart, remove (docs/commands.md).

Only containers the agent created (its label) or adopted are touched; container.run waits
until the container runs (and is healthy when it has a healthcheck), and an interrupted
container.run removes the container it had made.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from faden_agent import protocol
from faden_agent.common import testhooks
from faden_agent.common.failure import Cancelled
from faden_agent.workers.executor import specs
from faden_agent.workers.executor.commands.frame import Commands
from faden_agent.workers.executor.commands.image import PEER_OPTIONS, pull_or_fetch
from faden_agent.workers.executor.docker_ops import CommandFailed
from faden_agent.workers.executor.host_policy import PolicyDenied
from faden_agent.workers.executor.kinds import COMMON, CommandKind, register
from faden_agent.workers.executor.log_handoff import DRAIN_TIMEOUT_S, hand_over_logs
from faden_agent.workers.executor.ray_logs import image_user, make_ray_log_dir
from faden_agent.workers.executor.scheduler import Job

log = logging.getLogger(__name__)

POLL_START_S = 0.05
POLL_MAX_S = 0.5
# A container must still run this long after it was first seen running: a crash at start
# (bad arguments, missing file) then fails the command instead of passing as "running".
RUN_SETTLE_S = 0.2
STOP_TIMEOUT_S = 10  # seconds from SIGTERM to SIGKILL when a command gives none
NAME_SETTLE_S = 10.0  # a create that met a taken name waits this long for its holder to show
NAME_POLL_S = 0.1


# --- handlers


def container_run(commands: Commands, job: Job) -> dict[str, Any]:
    return _run(commands, job, name_settled=False)


def _run(commands: Commands, job: Job, name_settled: bool) -> dict[str, Any]:
    spec = job.spec
    ops = commands.ops
    existing = ops.find(spec["name"])
    if existing is not None:
        if (existing.labels or {}).get(protocol.LABEL_COMMAND_ID) == job.id:
            # created by this very command before a restart or a re-delivery: finish it
            if existing.status in ("created", "exited"):
                ops.start(existing)
            return _wait_running(commands, job, existing, created_now=False)
        authorize(commands, existing, job, "replace")
        if not spec["replace"]:
            owner = (existing.labels or {}).get(protocol.LABEL_COMMAND_ID, "an earlier command")
            raise CommandFailed(
                "conflict",
                f"a container named {spec['name']} already exists (from {owner}); send replace: true to recreate it",
            )
    _ensure_image(commands, job)
    commands.check(job)
    if existing is not None:
        drain_and_remove(commands, existing, force=True)
    testhooks.pause("before_create", commands.config.runtime_dir)
    # Judged again after the pull, and Docker gets the resolved sources: what a tenant
    # re-pointed since the command arrived is refused, not mounted.
    spec = _admitted(commands, spec)
    try:
        container = ops.create(spec, _labels(commands, job), _ray_mounts(commands, spec))
    except CommandFailed as failure:
        if failure.reason != "conflict" or name_settled:
            raise
        # The engine holds a name before a lookup finds its container: a create still in
        # flight (most often a killed predecessor's, of this very command) looked like none.
        _await_name(commands, job)
        return _run(commands, job, name_settled=True)
    try:
        commands.check(job)
        testhooks.pause("before_start", commands.config.runtime_dir)
        if _admitted(commands, spec) != spec:  # Docker resolves the sources again at start
            raise CommandFailed("policy_denied", f"{job.kind}: a bind source changed between create and start")
        ops.start(container)
        return _wait_running(commands, job, container, created_now=True)
    except CommandFailed as failure:
        if failure.reason not in ("container_exited", "unhealthy"):  # those stay for their logs
            _discard(commands, container)
        raise
    except Cancelled:
        _discard(commands, container)
        raise


def container_stop(commands: Commands, job: Job) -> dict[str, Any]:
    container = _target(commands, job, "stop")
    commands.ops.stop(container, job.spec["timeout_s"])
    attrs = commands.ops.reload(container)
    return {
        "container_id": container.id,
        "name": container.name,
        "exit_code": attrs["State"].get("ExitCode"),
        "message": f"container {container.name} stopped",
    }


def container_start(commands: Commands, job: Job) -> dict[str, Any]:
    container = _target(commands, job, "start")
    _judge_again(commands, container)
    commands.ops.start(container)
    result = _wait_running(commands, job, container, created_now=False)
    return {**result, "created": False, "message": f"container {container.name} started"}


def container_restart(commands: Commands, job: Job) -> dict[str, Any]:
    container = _target(commands, job, "restart")
    _judge_again(commands, container)
    commands.ops.restart(container, job.spec["timeout_s"])
    result = _wait_running(commands, job, container, created_now=False)
    return {**result, "created": False, "message": f"container {container.name} restarted"}


def container_remove(commands: Commands, job: Job) -> dict[str, Any]:
    container = commands.ops.find(job.spec["name"])
    if container is None:
        return {
            "name": job.spec["name"],
            "already_absent": True,
            "message": f"no container named {job.spec['name']}: nothing to remove",
        }
    authorize(commands, container, job, "remove")
    drain_and_remove(commands, container, job.spec["force"], job.spec["volumes"], job.spec["timeout_s"])
    return {
        "container_id": container.id,
        "name": container.name,
        "already_absent": False,
        "message": f"container {container.name} removed",
    }


def discard_own(commands: Commands, job: Job) -> bool:
    """Remove the container an interrupted container.run had made, so failed means no effect."""
    try:
        container = commands.ops.find(job.spec["name"])
    except CommandFailed:
        return False
    if container is None or (container.labels or {}).get(protocol.LABEL_COMMAND_ID) != job.id:
        return False
    _discard(commands, container)
    return True


# --- helpers


def authorize(commands: Commands, container: Any, job: Job, action: str) -> None:
    """Only containers the agent created (label) or adopted may be touched."""
    labels = container.labels or {}
    if labels.get(protocol.LABEL_MANAGED) == "true" or container.id in commands.journal.adopted_ids():
        return
    if job.spec.get("adopt"):
        commands.journal.adopt(container.id, container.name, job.id)
        log.info("adopted unmanaged container %s on command %s", container.name, job.id)
        return
    raise CommandFailed(
        "not_managed",
        f"refusing to {action} container {container.name}: it was not created "
        "by the agent (send adopt: true to take it over explicitly)",
    )


def _target(commands: Commands, job: Job, action: str) -> Any:
    container = commands.ops.find(job.spec["name"])
    if container is None:
        raise CommandFailed("not_found", f"no container named {job.spec['name']}")
    authorize(commands, container, job, action)
    return container


def drain_and_remove(
    commands: Commands,
    container: Any,
    force: bool,
    volumes: bool = False,
    timeout_s: int = STOP_TIMEOUT_S,
    logs_wait_s: float = DRAIN_TIMEOUT_S,
) -> None:
    """Stop a running (or restarting) container first when forced, so the log worker can
    ship every line it printed up to the stop before the engine deletes its log file."""
    state = container.attrs.get("State") or {}
    if force and (state.get("Running") or state.get("Restarting")):
        commands.ops.stop(container, timeout_s)
        commands.ops.reload(container)
    hand_over_logs(commands.config, container, logs_wait_s)
    commands.ops.remove(container, force=force, volumes=volumes)
    commands.journal.forget(container.id)


def _discard(commands: Commands, container: Any) -> None:
    try:
        commands.ops.remove(container, force=True)
    except CommandFailed as exc:
        log.warning("could not remove half-made container %s: %s", container.name, exc.message)


def _await_name(commands: Commands, job: Job) -> None:
    """Until a container of the spec's name can be looked up (NAME_SETTLE_S at most)."""
    settle_until = time.monotonic() + NAME_SETTLE_S
    while commands.ops.find(job.spec["name"]) is None and time.monotonic() < settle_until:
        commands.check(job)
        time.sleep(NAME_POLL_S)


def _admitted(commands: Commands, spec: dict[str, Any], kind: str = "container.run") -> dict[str, Any]:
    """The spec as the host policy admits it now, beside what the engine's containers bind
    (bind sources resolved)."""
    try:
        return commands.policy.admit(spec, commands.ops.binds())
    except PolicyDenied as exc:
        raise CommandFailed(exc.reason, f"{kind}: {exc}") from None


def _judge_again(commands: Commands, container: Any) -> None:
    """Docker resolves bind sources at every start: those of a container the agent made
    must still be what the policy admitted (an adopted one's are its operator's)."""
    if (container.labels or {}).get(protocol.LABEL_MANAGED) != "true":
        return
    host_config = container.attrs.get("HostConfig") or {}
    binds = [
        {"type": "bind", "source": m.get("Source") or "", "read_only": bool(m.get("ReadOnly"))}
        for m in host_config.get("Mounts") or []
        if m.get("Type") == "bind"
    ]
    spec = {"name": container.name, "mounts": binds, "ipc_mode": host_config.get("IpcMode")}
    if _admitted(commands, spec, f"container {container.name}") != spec:
        raise CommandFailed("policy_denied", f"container {container.name}: a bind source is no longer its real path")


def _ensure_image(commands: Commands, job: Job) -> None:
    image, policy = job.spec["image"], job.spec["pull"]
    if policy == "always" or (policy == "missing" and not commands.ops.has_image(image)):
        pull_or_fetch(commands, job)
    elif policy == "never" and not commands.ops.has_image(image):
        raise CommandFailed("image_not_found", f"image {image} is not on this machine and pull is never")


def _labels(commands: Commands, job: Job) -> dict[str, str]:
    spec = job.spec
    labels = dict(spec["labels"])
    labels[protocol.LABEL_MANAGED] = "true"
    labels[protocol.LABEL_AGENT_ID] = commands.config.agent_id
    labels[protocol.LABEL_COMMAND_ID] = job.id
    if spec["cluster"]:
        labels[protocol.LABEL_CLUSTER] = spec["cluster"]
    if spec["workload"]:
        labels[protocol.LABEL_WORKLOAD] = spec["workload"]
    if spec["ray"]:
        labels[protocol.LABEL_RAY] = "true"
    if spec["metrics_port"]:  # the inventory scrapes it for forward progress (workloads/watcher.py)
        labels[protocol.LABEL_METRICS_PORT] = str(spec["metrics_port"])
        if spec["metrics_path"]:
            labels[protocol.LABEL_METRICS_PATH] = spec["metrics_path"]
    return labels


def _ray_mounts(commands: Commands, spec: dict[str, Any]) -> list[dict[str, Any]]:
    if not spec["ray"]:
        return []
    user = spec.get("user") if spec.get("user") is not None else image_user(commands.ops, spec["image"])
    host_dir = make_ray_log_dir(Path(commands.config.ray_log_dir), spec["name"], user)
    return [{"type": "bind", "source": str(host_dir), "target": protocol.RAY_LOG_MOUNT, "read_only": False}]


def _wait_running(commands: Commands, job: Job, container: Any, created_now: bool) -> dict[str, Any]:
    """Until the container runs (and is healthy when it has a healthcheck)."""
    wants_health = bool(job.spec.get("healthcheck")) and job.spec["healthcheck"]["test"][0] != "NONE"
    delay = POLL_START_S
    seen_running: tuple[float, str] | None = None  # (when, StartedAt) of the first sighting
    while True:
        attrs = commands.ops.reload(container)
        state = attrs["State"]
        health = (state.get("Health") or {}).get("Status")
        if state.get("Running") and not state.get("Restarting"):
            if wants_health and health == "healthy":
                return _run_result(container, attrs, created_now, "healthy")
            if not wants_health:
                if seen_running is None or seen_running[1] != state.get("StartedAt"):
                    seen_running = (time.monotonic(), state.get("StartedAt"))
                left = RUN_SETTLE_S - (time.monotonic() - seen_running[0])
                if left <= 0:
                    return _run_result(container, attrs, created_now, "running")
                # Look again once, when the settle check ends (not on the polling ladder,
                # which overshot it by ~50 ms and cost four more inspects).
                commands.check(job)
                time.sleep(left)
                continue
            if health == "unhealthy":
                raise CommandFailed(
                    "unhealthy",
                    f"container {container.name} runs but its healthcheck fails",
                    container_id=container.id,
                )
        elif state.get("Status") in ("exited", "dead") or state.get("Restarting"):
            tail = commands.ops.logs_tail(container)
            raise CommandFailed(
                "container_exited",
                f"container {container.name} exited with code "
                f"{state.get('ExitCode')}" + (f"; last output: {tail[-300:]}" if tail else ""),
                container_id=container.id,
                exit_code=state.get("ExitCode"),
            )
        commands.check(job)
        time.sleep(delay)
        delay = min(delay * 2, POLL_MAX_S)


def _run_result(container: Any, attrs: dict[str, Any], created_now: bool, status: str) -> dict[str, Any]:
    verb = "started" if created_now else "was already created by this command and"
    return {
        "container_id": container.id,
        "name": container.name,
        "image": attrs["Config"]["Image"],
        "image_id": attrs["Image"],
        "status": status,
        "created": created_now,
        "message": f"container {container.name} {verb} is {status}",
    }


# --- the kinds


def by_container(spec: dict[str, Any]) -> str:
    return f"container:{spec['name']}"


ADOPT = {"adopt": (specs.boolean, False), **COMMON}
TARGET = {"name": specs.name}
RUN_OPTIONS: dict[str, tuple[specs.Check, Any]] = {
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
    "metrics_port": (specs.port, None),
    "metrics_path": (specs.url_path, None),
    "auth": (specs.auth, None),
    "pull": (specs.choice("missing", "always", "never"), "missing"),
    "replace": (specs.boolean, False),
    "user": (specs.string, None),
    "working_dir": (specs.string, None),
    **PEER_OPTIONS,
    "cap_add": (specs.str_list, []),
    "privileged": (specs.boolean, False),  # the host policy decides (host_policy.py)
    **ADOPT,
}

register(
    CommandKind(
        "container.run",
        container_run,
        {"name": specs.name, "image": specs.string},
        RUN_OPTIONS,
        deadline_s=900.0,
        queue_key=by_container,
        cancellable=True,
        undo=discard_own,
        host_policy=True,
    )
)
register(
    CommandKind(
        "container.stop",
        container_stop,
        TARGET,
        {"timeout_s": (specs.count, STOP_TIMEOUT_S), **ADOPT},
        queue_key=by_container,
    )
)
register(CommandKind("container.start", container_start, TARGET, ADOPT, queue_key=by_container, cancellable=True))
register(
    CommandKind(
        "container.restart",
        container_restart,
        TARGET,
        {"timeout_s": (specs.count, STOP_TIMEOUT_S), **ADOPT},
        queue_key=by_container,
        cancellable=True,
    )
)
register(
    CommandKind(
        "container.remove",
        container_remove,
        TARGET,
        {
            "force": (specs.boolean, True),
            "volumes": (specs.boolean, False),
            "timeout_s": (specs.count, STOP_TIMEOUT_S),
            **ADOPT,
        },
        queue_key=by_container,
    )
)
