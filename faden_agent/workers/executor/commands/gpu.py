"""The gpu.* kinds, answered by the inventory worker through its door (ipc/inventory_door.py):
it alone holds NVML and the GPU evidence. gpu.forget acknowledges a GPU removed for good (no
longer `missing`, its evidence dropped); refused for a GPU NVML still counts (docs/commands.md).
"""

from __future__ import annotations

from typing import Any

from faden_agent import protocol
from faden_agent.ipc import inventory_door as door
from faden_agent.workers.executor import specs
from faden_agent.workers.executor.commands.frame import Commands
from faden_agent.workers.executor.commands.node import answering
from faden_agent.workers.executor.docker_ops import CommandFailed
from faden_agent.workers.executor.kinds import COMMON, CommandKind, register
from faden_agent.workers.executor.scheduler import Job

FAILURES = {"unknown": "not_found", "present": "gpu_present", "busy": "busy"}  # door outcome -> reason


def gpu_forget(commands: Commands, job: Job) -> dict[str, Any]:
    return answering(commands, job, _forget)


def _forget(commands: Commands, job: Job) -> dict[str, Any]:
    uuid = job.spec["uuid"]
    answer = door.ask(commands.config.runtime_dir, door.GPU_FORGET, {"uuid": uuid})
    if answer is None:
        raise CommandFailed("inventory_unavailable", "gpu.forget: the inventory worker did not answer", uuid=uuid)
    if "error" in answer:
        raise CommandFailed("internal_error", f"gpu.forget: {answer['error']}", uuid=uuid)
    outcome, message = str(answer.get("outcome")), str(answer.get("message"))[:300]
    if outcome != "forgotten":
        raise CommandFailed(FAILURES.get(outcome, "internal_error"), f"gpu.forget: {message}", uuid=uuid)
    return {"uuid": uuid, "outcome": outcome, "message": message}


def gpu_uuid(key: str, value: Any) -> str:
    text = specs.string(key, value)
    if not text.startswith("GPU-") or len(text) > 96 or not text.isprintable():
        raise specs.SpecError(f"{protocol.quote(key)} must be a GPU uuid (GPU-...), got {protocol.quote(text, 40)}")
    return text


def by_gpu(spec: dict[str, Any]) -> str:
    return "gpu"  # one at a time, off the worker's loop: the door may take a moment


register(
    CommandKind(
        "gpu.forget",
        gpu_forget,
        {"uuid": gpu_uuid},
        {"request_id": (specs.string, None), **COMMON},
        deadline_s=30.0,
        queue_key=by_gpu,
    )
)
