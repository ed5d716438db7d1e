"""One description of a managed container, shared by the inventory (docker.containers[]) and the
executor's container.adopted event: describe() from Docker's inspect answer, one vocabulary
(`id`, `state`, ...), only our labels (LABEL_PREFIX) and, of the environment, only
NVIDIA_VISIBLE_DEVICES (others may hold secrets).
"""

from __future__ import annotations

from typing import Any

LABEL_PREFIX = "io.fadenstack."


def describe(details: dict[str, Any]) -> dict[str, Any]:
    """The description of one container from Docker's inspect answer."""
    state = details.get("State") or {}
    config = details.get("Config") or {}
    host_config = details.get("HostConfig") or {}
    health = (state.get("Health") or {}).get("Status")
    return {
        "id": details["Id"],
        "name": details.get("Name", "").lstrip("/"),
        "image": config.get("Image"),
        "image_id": details.get("Image"),
        "state": state.get("Status"),
        "health": health,
        "exit_code": state.get("ExitCode"),
        "oom_killed": state.get("OOMKilled"),
        "started_at": state.get("StartedAt"),
        "restart_count": details.get("RestartCount"),
        "runtime": host_config.get("Runtime"),
        "labels": {k: v for k, v in (config.get("Labels") or {}).items() if k.startswith(LABEL_PREFIX)},
        "gpus": gpu_assignment(host_config, config.get("Env") or []),
    }


def gpu_assignment(host_config: dict[str, Any], env: list[str]) -> dict[str, Any] | None:
    """GPUs given to the container: Docker device requests (`--gpus`), else the NVIDIA
    runtime's NVIDIA_VISIBLE_DEVICES. None: no GPU. Only that one variable is read from
    the environment (others may hold secrets)."""
    requests = host_config.get("DeviceRequests")
    for request in requests if isinstance(requests, list) else ():
        if not isinstance(request, dict):
            continue
        capabilities = [c for group in request.get("Capabilities") or () if isinstance(group, list) for c in group]
        if request.get("Driver") == "nvidia" or "gpu" in capabilities:
            ids = request.get("DeviceIDs") or []
            count = request.get("Count")
            return {
                "source": "device_requests",
                "count": "all" if count == -1 else (count or len(ids)),
                "device_ids": ids,
            }
    for item in env:
        name, _, value = item.partition("=")
        if name == "NVIDIA_VISIBLE_DEVICES" and value and value not in ("void", "none"):
            ids = [] if value == "all" else value.split(",")
            return {"source": "env", "count": "all" if value == "all" else len(ids), "device_ids": ids}
    return None
