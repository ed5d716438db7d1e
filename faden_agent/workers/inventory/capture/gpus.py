"""The GPUs of one container as a capture holds them, read from the inventory's sections (a
collection made for the capture): its GPUs are those it was given (device requests or
NVIDIA_VISIBLE_DEVICES) and those NVML lists its processes on; per GPU its utilisation,
memory, GPM activity, active clock events, NVML's processes, verdict, and recent Xids."""

from __future__ import annotations

from typing import Any

from faden_agent.protocol.capture import CaptureGpu

MAX_PROCESSES = 32
FIGURES = (
    "utilization_gpu",
    "utilization_memory",
    "memory_used",
    "memory_free",
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "dram_active",
    "temperature_c",
    "power_draw_w",
)


def _devices(sections: dict[str, Any]) -> list[dict[str, Any]]:
    devices = (sections.get("gpu") or {}).get("devices") if isinstance(sections.get("gpu"), dict) else None
    return [d for d in devices or () if isinstance(d, dict) and isinstance(d.get("index"), int)]


def assigned(sections: dict[str, Any], container_id: str) -> dict[str, Any] | None:
    """The container's GPU assignment from the inventory's docker section (protocol/container.py)."""
    for container in (sections.get("docker") or {}).get("containers") or ():
        if isinstance(container, dict) and container.get("id") == container_id:
            return container.get("gpus")
    return None


def container_gpus(sections: dict[str, Any], container_id: str, named: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The devices of the container's GPUs, by index: assigned, named by the caller
    ([{index, uuid}]), or running one of its processes."""
    devices = _devices(sections)
    assignment = assigned(sections, container_id) or {}
    ids = {str(i).strip() for i in assignment.get("device_ids") or ()}
    ids |= {str(gpu.get("uuid")) for gpu in named if gpu.get("uuid")}
    indexes = {gpu.get("index") for gpu in named if isinstance(gpu.get("index"), int)}
    every = bool(assignment) and (assignment.get("count") == "all" or not assignment.get("device_ids"))

    def mine(device: dict[str, Any]) -> bool:
        mig = (device.get("mig") or {}).get("devices") or ()
        instances = {str(m.get("uuid")) for m in mig if isinstance(m, dict)}
        processes = {p.get("container_id") for p in device.get("processes") or () if isinstance(p, dict)}
        return (
            every
            or device["index"] in indexes
            or str(device["index"]) in ids
            or str(device.get("uuid")) in ids
            or bool(instances & ids)
            or container_id in processes
        )

    return sorted((d for d in devices if mine(d)), key=lambda d: d["index"])


def gpu_state(device: dict[str, Any], now: float, window_s: float) -> dict[str, Any]:
    """One GPU then: its figures, verdict and the Xids of the last `window_s` seconds."""
    health: dict[str, Any] = device["health"] if isinstance(device.get("health"), dict) else {}
    usage: dict[str, Any] = device["usage"] if isinstance(device.get("usage"), dict) else {}
    xids = [x for x in health.get("xid") or () if isinstance(x, dict) and now - float(x.get("at") or 0) <= window_s]
    state = {
        "index": device["index"],
        "uuid": device.get("uuid"),
        "name": device.get("name"),
        "state": device.get("state"),
        "verdict": health.get("verdict"),
        "reasons": list(health.get("reasons") or ())[:16],
        "usage": {name: usage.get(name) for name in FIGURES if usage.get(name) is not None},
        "memory_total": device.get("memory_total"),
        "clock_events_s": (health.get("usage") or {}).get("clock_events_active_s") or {},
        "processes": [
            {
                "pid": p.get("pid"),
                "name": p.get("name"),
                "container_id": (p.get("container_id") or "")[:12] or None,
                "used_memory": (p.get("usage") or {}).get("used_memory"),
                "utilization_sm": (p.get("usage") or {}).get("utilization_sm"),
            }
            for p in (device.get("processes") or ())[:MAX_PROCESSES]
            if isinstance(p, dict)
        ],
        "xids": xids,
        "gpm": device.get("gpm"),
    }
    if device.get("error"):
        state["error"] = device["error"]
    return state


def verdicts(gpus: list[dict[str, Any]]) -> list[CaptureGpu]:
    """The summary's part: index, uuid and verdict of each GPU."""
    return [{"index": g["index"], "uuid": g.get("uuid"), "verdict": g.get("verdict")} for g in gpus]
