"""The cause of a container's death, OOM or unhealthy state: its GPUs (device requests or
NVIDIA_VISIBLE_DEVICES, placed by the inventory's GPU evidence) and, when one of them had an
Xid or turned degraded/failed within WORKLOAD_FAULT_WINDOW_SEC before, `suspected: "hardware"`
with that evidence; else `"application"` with the exit code and the last stderr lines."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from faden_agent.node.gpu_faults import read_gpus
from faden_agent.protocol.container import gpu_assignment

ERROR_LINES = 5
ERROR_LINE_BYTES = 300
CAUSE_TYPES = ("container.die", "container.oom")


def wants_cause(data: dict[str, Any]) -> bool:
    return data.get("type") in CAUSE_TYPES or (
        data.get("type") == "container.health_status" and data.get("health") == "unhealthy"
    )


def container_gpus(attrs: dict[str, Any], known: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """[{index, uuid}] of the container's GPUs; every GPU known for "all" or a bare count."""
    assignment = gpu_assignment(attrs.get("HostConfig") or {}, (attrs.get("Config") or {}).get("Env") or [])
    if assignment is None:
        return []
    by_index = {gpu["index"]: uuid for uuid, gpu in known.items()}
    if not assignment["device_ids"]:
        return sorted(({"index": g["index"], "uuid": u} for u, g in known.items()), key=lambda g: g["index"])
    found = []
    for device in assignment["device_ids"]:
        device = str(device).strip()
        if device.isdigit():
            found.append({"index": int(device), "uuid": by_index.get(int(device))})
        else:
            found.append({"index": (known.get(device) or {}).get("index"), "uuid": device})
    return found


def cause(
    data: dict[str, Any],
    attrs: dict[str, Any] | None,
    error_lines: Callable[[], list[str]],
    state_dir: Path,
    window_s: float,
) -> dict[str, Any]:
    """The fields to add to the event `data` (which names its time)."""
    known = read_gpus(state_dir)
    gpus = container_gpus(attrs or {}, known)
    at = float(data.get("time") or 0)
    evidence = []
    for gpu in gpus:
        kept = known.get(gpu["uuid"] or "") or {}
        change = kept.get("verdict_change")
        worse = [{"event": "verdict", **change}] if isinstance(change, dict) and change.get("new") != "ok" else []
        for fault in [*(kept.get("xid") or []), *worse]:
            fault_at = fault.get("at") if isinstance(fault, dict) else None
            if isinstance(fault_at, (int, float)) and at - window_s <= fault_at <= at + 1:
                evidence.append(
                    {"index": gpu["index"], "uuid": gpu["uuid"], **fault, "before_s": round(at - fault_at, 1)}
                )
    if evidence:
        return {"gpus": gpus, "suspected": "hardware", "evidence": evidence}
    state = (attrs or {}).get("State") or {}
    exit_code = data.get("exit_code", state.get("ExitCode"))
    return {"gpus": gpus, "suspected": "application", "exit_code": exit_code, "last_errors": error_lines()}


def last_error_lines(api: Any, container_id: str) -> list[str]:
    """The container's last stderr lines (bounded); [] when the engine cannot tell."""
    try:
        raw = api.logs(container_id, stdout=False, stderr=True, tail=ERROR_LINES)
    except Exception:  # noqa: BLE001 - gone, or a log driver without reads: no lines
        return []
    lines = raw.decode(errors="replace").splitlines()[-ERROR_LINES:]
    return [line[:ERROR_LINE_BYTES] for line in lines if line.strip()]
