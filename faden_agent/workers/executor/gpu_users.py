"""Who uses a GPU, for gpu.check and gpu.reset: the running containers the engine gave it (their
device ids or NVIDIA_VISIBLE_DEVICES naming its index or uuid; `all` or a bare count: every
GPU, since the engine does not say which) or NVML lists processes of, and the processes NVML
lists outside any container. A container counts as using a GPU when any of these says so.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from faden_agent.protocol.container import gpu_assignment


class User(NamedTuple):
    name: str
    id: str
    how: str  # "device ids", "every GPU", "NVML lists its processes"
    container: Any

    def said(self) -> str:
        return f"{self.name} ({self.how})"


def users_of(containers: list[Any], gpus: dict[str, dict[str, Any]]) -> dict[str, list[User]]:
    """uuid -> the running containers that use it, for the GPUs `gpus` (the door's gpu.users)."""
    found: dict[str, list[User]] = {uuid: [] for uuid in gpus}
    for container in containers:
        attrs = container.attrs or {}
        assignment = gpu_assignment(attrs.get("HostConfig") or {}, (attrs.get("Config") or {}).get("Env") or [])
        for uuid, gpu in gpus.items():
            how = _given(assignment, uuid, gpu.get("index"))
            if how is None and any(p.get("container_id") == container.id for p in gpu.get("processes") or ()):
                how = "NVML lists its processes"
            if how is not None:
                found[uuid].append(User(container.name, container.id, how, container))
    return found


def outside(gpu: dict[str, Any]) -> list[str]:
    """The processes NVML lists on the GPU outside any container, named."""
    return [
        f"pid {p.get('pid')} ({p.get('name') or '?'})" for p in gpu.get("processes") or () if not p.get("container_id")
    ]


def _given(assignment: dict[str, Any] | None, uuid: str, index: Any) -> str | None:
    if assignment is None:
        return None
    ids = [str(d).strip() for d in assignment["device_ids"]]
    if not ids:
        return "every GPU" if assignment["count"] == "all" else f"{assignment['count']} GPUs, which ones unsaid"
    return "device ids" if uuid in ids or str(index) in ids else None
