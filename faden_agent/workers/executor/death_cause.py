"""The cause of a container's death, OOM or unhealthy state, by NVIDIA's Xid catalogue
(node/xid_catalogue.py): `hardware` only for a GPU-fault Xid or error event, or a turn to
failed, on the GPUs it really used (its device ids, else those NVML saw its processes on), from
WORKLOAD_FAULT_WINDOW_SEC before to SETTLE_S after it; else `application`, its application-class
Xids listed, its exit code and last stderr lines (no escapes, secrets redacted, capped).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faden_agent.common.redact import redact_secrets, terminal_safe
from faden_agent.ipc import inventory_door as door
from faden_agent.node.gpu_faults import VERSION, problem, read_gpus
from faden_agent.node.xid_catalogue import APPLICATION_EVENTS, FAILED, GPU_FAULT_EVENTS, XIDS
from faden_agent.protocol.container import gpu_assignment

if TYPE_CHECKING:
    from faden_agent.engine.client import EngineClient

ERROR_LINES = 5
ERROR_LINE_BYTES = 300
ERROR_READ_BYTES = 64 << 10  # of the container's log tail: the lines are cut from this much
SETTLE_S = 3.0  # after a death, the kernel's and NVML's lines of what killed it are waited for
CAUSE_TYPES = ("container.die", "container.oom")
# The rule that decided, in the event's `rule`.
GPU_FAULT, GPU_FAILED = "gpu_fault", "gpu_failed"
APPLICATION_XIDS, NO_GPU_FAULT, NO_GPUS = "application_xids", "no_gpu_fault", "no_gpus"


def wants_cause(data: dict[str, Any]) -> bool:
    return data.get("type") in CAUSE_TYPES or (
        data.get("type") == "container.health_status" and data.get("health") == "unhealthy"
    )


def container_gpus(
    attrs: dict[str, Any], known: dict[str, dict[str, Any]], container_id: str | None = None
) -> tuple[list[dict[str, Any]], str]:
    """([{index, uuid}] of the GPUs the container used, where that came from): its device ids
    ("device_ids"); for "all" or a count, the GPUs NVML saw its processes on ("processes");
    ("none") when neither tells."""
    assignment = gpu_assignment(attrs.get("HostConfig") or {}, (attrs.get("Config") or {}).get("Env") or [])
    if assignment is None:
        return [], "none"
    if not assignment["device_ids"]:
        used = [
            {"index": gpu["index"], "uuid": uuid}
            for uuid, gpu in known.items()
            if container_id and container_id in (gpu.get("containers") or {})
        ]
        return sorted(used, key=lambda g: g["index"]), "processes" if used else "none"
    by_index = {gpu["index"]: uuid for uuid, gpu in known.items()}
    found = []
    for device in assignment["device_ids"]:
        device = str(device).strip()
        if device.isdigit():
            found.append({"index": int(device), "uuid": by_index.get(int(device))})
        else:
            found.append({"index": (known.get(device) or {}).get("index"), "uuid": device})
    return found, "device_ids"


def cause(
    data: dict[str, Any],
    attrs: dict[str, Any] | None,
    error_lines: Callable[[], list[str]],
    known: dict[str, dict[str, Any]],
    window_s: float,
) -> dict[str, Any]:
    """The fields to add to the event `data` (which names its time and container); `known` is
    the GPU evidence (uuid -> its evidence, node/gpu_faults.py's checked form)."""
    container_id = data.get("container_id")
    gpus, source = container_gpus(attrs or {}, known, container_id)
    at = float(data.get("time") or 0)
    faults, application = [], []
    for gpu in gpus:
        kept = known.get(gpu["uuid"] or "") or {}
        change = kept.get("verdict_change")
        turned = [{"event": "verdict", **change}] if change and change.get("new") == FAILED else []
        for found in [*(kept.get("xid") or []), *turned]:
            if not at - window_s <= found["at"] <= at + SETTLE_S:
                continue
            entry = {"index": gpu["index"], "uuid": gpu["uuid"], **found, "before_s": round(at - found["at"], 1)}
            kind = _kind(found)
            if kind == GPU_FAULT:
                faults.append(entry)
            elif kind == APPLICATION_XIDS and found.get("container_id") in (None, container_id):
                xid = XIDS.get(found["code"]) if found["event"] == "xid" else None
                application.append({**entry, "nvidia": xid.nvidia if xid else found["event"]})
    fields: dict[str, Any] = {"gpus": gpus, "gpus_from": source}
    if faults:
        rule = GPU_FAULT if any(f["event"] != "verdict" for f in faults) else GPU_FAILED
        return {**fields, "suspected": "hardware", "rule": rule, "evidence": faults}
    state = (attrs or {}).get("State") or {}
    rule = APPLICATION_XIDS if application else NO_GPU_FAULT if gpus else NO_GPUS
    fields.update(suspected="application", rule=rule, exit_code=data.get("exit_code", state.get("ExitCode")))
    if application:
        fields["xids"] = application
    fields["last_errors"] = clean_lines(error_lines())
    return fields


def _kind(found: dict[str, Any]) -> str | None:
    """GPU_FAULT, APPLICATION_XIDS, or None (not counted) for one Xid, error event or change."""
    event = found["event"]
    if event == "verdict" or event in GPU_FAULT_EVENTS:
        return GPU_FAULT
    if event in APPLICATION_EVENTS:
        return APPLICATION_XIDS
    xid = XIDS.get(found["code"]) if event == "xid" else None
    if xid is None:
        return None
    return GPU_FAULT if xid.gpu_fault else APPLICATION_XIDS if xid.application else None


def known_gpus(runtime_dir: Path, state_dir: Path) -> dict[str, dict[str, Any]]:
    """The GPU evidence as the inventory holds it now (its door: Xids it has not written yet
    too), else as its file holds it; checked field by field either way ({}: none usable)."""
    answer = door.ask(runtime_dir, door.GPU_EVIDENCE, {"uuids": None})
    gpus = (answer or {}).get("gpus")
    if isinstance(gpus, dict) and problem({"version": VERSION, "gpus": gpus}) is None:
        return gpus
    return read_gpus(state_dir)


def clean_lines(lines: list[str]) -> list[str]:
    """At most ERROR_LINES lines of ERROR_LINE_BYTES, without terminal escapes or control
    characters, every secret redacted: a container's stderr is its tenant's text."""
    cleaned = [redact_secrets(terminal_safe(line[:ERROR_READ_BYTES])).strip() for line in lines]
    return [line.encode()[:ERROR_LINE_BYTES].decode(errors="ignore") for line in cleaned if line][-ERROR_LINES:]


def last_error_lines(engine: EngineClient, container_id: str, attrs: dict[str, Any] | None) -> list[str]:
    """The container's last stderr lines (bounded); [] when the engine cannot tell. `attrs`:
    its inspect, which says whether it has a TTY (then its one stream is read)."""
    tty = bool(((attrs or {}).get("Config") or {}).get("Tty"))
    try:
        raw = engine.logs(container_id, tty=tty, stdout=False, stderr=True, tail=ERROR_LINES).read_all(ERROR_READ_BYTES)
    except Exception:  # noqa: BLE001 - gone, or a log driver without reads: no lines
        return []
    return raw.decode(errors="replace").splitlines()[-ERROR_LINES:]
