"""The gpu.* kinds, answered by the inventory worker through its door (ipc/inventory_door.py):
it alone holds NVML and the GPU evidence. gpu.forget acknowledges a GPU removed for good;
gpu.check and gpu.reset are its remedy jobs, read step by step into the timeline: the executor
decides who uses a GPU (gpu_users.py), refuses or stops only those, and never restarts them.
"""

from __future__ import annotations

import time
from typing import Any

from faden_agent import protocol
from faden_agent.ipc import inventory_door as door
from faden_agent.workers.executor import specs
from faden_agent.workers.executor.commands.frame import Commands
from faden_agent.workers.executor.commands.node import HARD_STOP_RESERVE_S, Progress, answering, ours, stop_each
from faden_agent.workers.executor.docker_ops import CommandFailed
from faden_agent.workers.executor.gpu_users import User, outside, users_of
from faden_agent.workers.executor.kinds import COMMON, CommandKind, register
from faden_agent.workers.executor.scheduler import Job

FAILURES = {"unknown": "not_found", "present": "gpu_present", "busy": "busy"}  # door outcome -> reason
LEVEL_TIME_LIMITS = {1: 120.0, 2: 900.0, 3: 3600.0, 4: 4 * 3600.0}  # DCGM's levels: seconds to hours
CHECK_DEADLINE_S = LEVEL_TIME_LIMITS[4] + 300.0  # when neither spec nor envelope bounds it
RESET_DEADLINE_S = 600.0
ANSWER_SLACK_S = 15.0  # of the deadline, kept for the inventory's end to come back
POLL_S = 0.3
CANCEL_WAIT_S = 10.0  # for the inventory to end a job it was told to end
FIRST_READ_WAIT_S = 30.0  # for a just started inventory worker's first NVML read
STOP_SHARE = 0.5  # of a reset's deadline, the most its containers' stops may take


def gpu_forget(commands: Commands, job: Job) -> dict[str, Any]:
    return answering(commands, job, _forget)


def gpu_check(commands: Commands, job: Job) -> dict[str, Any]:
    return answering(commands, job, _check)


def gpu_reset(commands: Commands, job: Job) -> dict[str, Any]:
    return answering(commands, job, _reset)


def _forget(commands: Commands, job: Job) -> dict[str, Any]:
    uuid = job.spec["uuid"]
    answer = _ask(commands, door.GPU_FORGET, {"uuid": uuid})
    outcome, message = str(answer.get("outcome")), str(answer.get("message"))[:300]
    if outcome != "forgotten":
        raise CommandFailed(FAILURES.get(outcome, "internal_error"), f"gpu.forget: {message}", uuid=uuid)
    return {"uuid": uuid, "outcome": outcome, "message": message}


def _check(commands: Commands, job: Job) -> dict[str, Any]:
    spec = job.spec
    gpus = _gpus(commands, None)
    uuids = sorted(gpus, key=lambda u: gpus[u]["index"]) if spec["gpus"] == "all" else list(dict.fromkeys(spec["gpus"]))
    unknown = [u for u in uuids if u not in gpus]
    if unknown or not uuids:
        raise CommandFailed("not_found", f"gpu.check: no such GPU here: {', '.join(unknown) or 'none on this machine'}")
    asked = {u: gpus[u] for u in uuids}
    users = users_of(commands.ops.running_containers(), asked)
    busy = {u: [*(x.said() for x in users[u]), *outside(asked[u])] for u in uuids}
    busy = {u: names for u, names in busy.items() if names}
    if busy and not spec["allow_busy"]:
        raise CommandFailed("gpu_in_use", f"gpu.check: {_busy_said(asked, busy)} (allow_busy checks them anyway)")
    limit = spec["time_limit_s"] or LEVEL_TIME_LIMITS[spec["level"]]
    limit = min(limit, job.remaining_s() - ANSWER_SLACK_S)
    body: door.CheckRequest = {
        "uuids": uuids,
        "level": spec["level"],
        "time_limit_s": max(1.0, limit),
        "busy": busy,
        "command_id": job.id,
    }
    return _run(commands, job, door.GPU_CHECK, body)


def _reset(commands: Commands, job: Job) -> dict[str, Any]:
    uuid = job.spec["gpu"]
    gpus = _gpus(commands, [uuid])
    if uuid not in gpus:
        raise CommandFailed("not_found", f"gpu.reset: no GPU {uuid} on this machine")
    gpu = gpus[uuid]
    where = f"GPU {gpu['index']} ({uuid})"
    alien = outside(gpu)
    if alien:
        raise CommandFailed(
            "gpu_in_use", f"gpu.reset: {where} runs processes outside any container: {', '.join(alien)}; stop them"
        )
    users = users_of(commands.ops.running_containers(), {uuid: gpu})[uuid]
    stopped: dict[str, dict[str, Any]] = {}
    if users and not job.spec["stop_containers"]:
        named = ", ".join(u.said() for u in users)
        raise CommandFailed("gpu_in_use", f"gpu.reset: {where} is used by containers {named} (stop_containers)")
    if users:
        stopped = _stop_users(commands, job, where, users)
    body: door.ResetRequest = {
        "uuid": uuid,
        "time_limit_s": max(1.0, job.remaining_s() - ANSWER_SLACK_S),
        "command_id": job.id,
    }
    try:
        result = _run(commands, job, door.GPU_RESET, body)
    except CommandFailed as failure:
        failure.result["stopped"] = stopped
        raise
    return {**result, "stopped": stopped}


def _stop_users(commands: Commands, job: Job, where: str, users: list[User]) -> dict[str, dict[str, Any]]:
    """Stops the containers using the GPU (each with its grace, hard at the end of half the
    deadline; their last lines shipped; not removed); refused when one is not this agent's."""
    mine = {c.id for c in ours(commands).values()}
    foreign = [u.name for u in users if u.id not in mine]
    if foreign:
        raise CommandFailed(
            "gpu_in_use", f"gpu.reset: {where} is used by containers this agent does not manage: {', '.join(foreign)}"
        )
    until = time.time() + STOP_SHARE * max(0.0, job.remaining_s())
    graceful_until = until - min(HARD_STOP_RESERVE_S, STOP_SHARE * (until - time.time()))
    progress = Progress(commands, job, {u.name: "stopping" for u in users}, drain=False)
    outcomes = stop_each(commands, job, [u.container for u in users], graceful_until, until, progress, remove=False)
    failed = {n: o["message"] for n, o in outcomes.items() if o["how"] in ("failed", "unfinished")}
    if failed:
        said = f"{', '.join(sorted(failed))}: {'; '.join(failed.values())}"
        raise CommandFailed(
            "docker_error", f"gpu.reset: could not stop {said}; nothing was reset"[:1500], stopped=outcomes
        )
    return outcomes


def _run(
    commands: Commands, job: Job, kind: door.DoorKind, body: door.CheckRequest | door.ResetRequest
) -> dict[str, Any]:
    """Starts the inventory's job and reads it to its end: each step a progress record; at the
    deadline or a cancel the job is told to end (its programs with it)."""
    started = _ask(commands, kind, body)
    if started.get("outcome") != "started":
        outcome = str(started.get("outcome"))
        raise CommandFailed(FAILURES.get(outcome, "internal_error"), f"{kind}: {started.get('message')}"[:1500])
    job_id = str(started["job"])
    since, cancel_at = 0, None
    while True:
        answer: dict[str, Any] | None = door.ask(
            commands.config.runtime_dir, door.GPU_JOB, {"job": job_id, "since": since}
        )
        if answer is not None and "error" not in answer:
            for step in answer.get("steps") or []:
                commands.progress(job, **step)
            since = int(answer.get("next") or since)
            end = answer.get("end")
            if isinstance(end, dict):
                return _ended(kind, end)
            if answer.get("state") == "unknown":
                raise CommandFailed("internal_error", f"{kind}: the inventory no longer knows job {job_id}")
        if job.should_stop():
            if cancel_at is None:
                cancel_at = time.monotonic()
                door.ask(commands.config.runtime_dir, door.GPU_CANCEL, {"job": job_id})
            elif time.monotonic() - cancel_at > CANCEL_WAIT_S:
                raise CommandFailed("timeout", f"{kind}: the inventory did not end job {job_id} in time")
        time.sleep(POLL_S)


def _ended(kind: str, end: dict[str, Any]) -> dict[str, Any]:
    result = {k: v for k, v in (end.get("result") or {}).items() if k != "message"}
    message = str(end.get("message") or f"{kind} done")
    if end.get("ok"):
        return {**result, "message": message}
    reason = str(end.get("reason") or "internal_error")
    raise CommandFailed(reason if reason in protocol.REASONS else "internal_error", message, **result)


def _gpus(commands: Commands, uuids: list[str] | None) -> dict[str, dict[str, Any]]:
    """The GPUs of the inventory's last NVML read (waiting for a just started worker's first)."""
    until = time.monotonic() + FIRST_READ_WAIT_S
    while True:
        answer = _ask(commands, door.GPU_USERS, {"uuids": uuids})
        if answer.get("read") is not False or time.monotonic() >= until:
            gpus = answer.get("gpus")
            return gpus if isinstance(gpus, dict) else {}
        time.sleep(POLL_S)


def _ask(commands: Commands, kind: door.DoorKind, body: door.Request) -> dict[str, Any]:
    answer = door.ask(commands.config.runtime_dir, kind, body)
    if answer is None:
        raise CommandFailed("inventory_unavailable", f"{kind}: the inventory worker did not answer")
    if "error" in answer:
        raise CommandFailed("internal_error", f"{kind}: {answer['error']}")
    return answer


def _busy_said(gpus: dict[str, dict[str, Any]], busy: dict[str, list[str]]) -> str:
    return "; ".join(f"GPU {gpus[u]['index']} ({u}) runs work: {', '.join(names)}" for u, names in busy.items())


def gpu_uuid(key: str, value: Any) -> str:
    text = specs.string(key, value)
    if not text.startswith("GPU-") or len(text) > 96 or not text.isprintable():
        raise specs.SpecError(f"{protocol.quote(key)} must be a GPU uuid (GPU-...), got {protocol.quote(text, 40)}")
    return text


def gpu_uuids(key: str, value: Any) -> str | list[str]:
    if value == "all":
        return "all"
    if not isinstance(value, list) or not 0 < len(value) <= 64:
        raise specs.SpecError(
            f'{protocol.quote(key)} must be "all" or a list of 1 to 64 GPU uuids, got {protocol.quote(value)}'
        )
    return [gpu_uuid(f"{key}[{n}]", item) for n, item in enumerate(value)]


def level(key: str, value: Any) -> int:
    if type(value) is not int or not 1 <= value <= 4:
        raise specs.SpecError(
            f"{protocol.quote(key)} must be 1, 2, 3 or 4 (DCGM's levels), got {protocol.quote(value)}"
        )
    return value


def by_gpu(spec: dict[str, Any]) -> str:
    return "gpu"  # one at a time, off the worker's loop: the door may take a moment


GPU_COMMON = {"request_id": (specs.string, None), **COMMON}
register(CommandKind("gpu.forget", gpu_forget, {"uuid": gpu_uuid}, GPU_COMMON, deadline_s=30.0, queue_key=by_gpu))
register(
    CommandKind(
        "gpu.check",
        gpu_check,
        {},
        {
            "gpus": (gpu_uuids, "all"),
            "level": (level, 1),
            "time_limit_s": (specs.seconds, None),
            "allow_busy": (specs.boolean, False),
            **GPU_COMMON,
        },
        deadline_s=CHECK_DEADLINE_S,
        queue_key=by_gpu,
        cancellable=True,
    )
)
register(
    CommandKind(
        "gpu.reset",
        gpu_reset,
        {"gpu": gpu_uuid},
        {"stop_containers": (specs.boolean, False), **GPU_COMMON},
        deadline_s=RESET_DEADLINE_S,
        queue_key=by_gpu,
        cancellable=False,  # a reset half done by nvidia-smi is worse than one let finish
    )
)
