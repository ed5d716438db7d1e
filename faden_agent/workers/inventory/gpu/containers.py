"""GPU use per container: the container of a GPU process from /proc/<pid>/cgroup (cgroup v1
and v2; Docker's cgroupfs driver `/docker/<id>` and systemd driver `docker-<id>.scope`), and
per managed container its memory (and SM utilisation where NVML samples it) on each GPU,
added to the inventory's docker.containers[].usage.gpus."""

from __future__ import annotations

import os
import re
from typing import Any

CONTAINER_IN_PATH = re.compile(r"(?:docker|cri-containerd|libpod)[-/]([0-9a-f]{64})(?:\.scope)?(?=/|$)")
MAX_CGROUP_BYTES = 64 << 10


def container_in_cgroup(text: str) -> str | None:
    """The container id in a /proc/<pid>/cgroup text: the unified (v2) line first, else the
    first v1 line naming one; the innermost id of a nested path."""
    found: str | None = None
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        path = rest.partition(":")[2]
        ids = CONTAINER_IN_PATH.findall(path)
        if ids and hierarchy == "0":
            return ids[-1]
        if ids and found is None:
            found = ids[-1]
    return found


def container_of_pid(pid: int, proc_root: str = "/proc") -> str | None:
    """The container id of a process, None when it runs in none (or is gone)."""
    try:
        with open(os.path.join(proc_root, str(int(pid)), "cgroup"), "rb") as fh:
            return container_in_cgroup(fh.read(MAX_CGROUP_BYTES).decode("ascii", "replace"))
    except (OSError, ValueError):
        return None


def add_container_gpu_use(sections: dict[str, Any]) -> None:
    """docker.containers[].usage.gpus: [{index, uuid, used_memory, utilization_sm}] from the
    GPU processes whose cgroup names that container (summed over its processes)."""
    containers = (sections.get("docker") or {}).get("containers")
    devices = (sections.get("gpu") or {}).get("devices")
    if not isinstance(containers, list) or not isinstance(devices, list):
        return
    use: dict[str, dict[str, dict[str, Any]]] = {}
    for device in devices:
        for process in device.get("processes") or ():
            container_id = process.get("container_id")
            if not container_id:
                continue
            entry = use.setdefault(container_id, {}).setdefault(
                str(device.get("uuid")),
                {"index": device.get("index"), "uuid": device.get("uuid"), "used_memory": 0, "utilization_sm": None},
            )
            usage = process.get("usage") or {}
            if isinstance(usage.get("used_memory"), int):
                entry["used_memory"] += usage["used_memory"]
            if isinstance(usage.get("utilization_sm"), int):
                entry["utilization_sm"] = (entry["utilization_sm"] or 0) + usage["utilization_sm"]
    with_use = []
    for container in containers:  # new dicts: the section may be the last good one, kept for reuse
        gpus = use.get(container.get("id"))
        if gpus:
            usage = {**(container.get("usage") or {}), "gpus": sorted(gpus.values(), key=lambda g: str(g["index"]))}
            container = {**container, "usage": usage}
        with_use.append(container)
    sections["docker"] = {**sections["docker"], "containers": with_use}
