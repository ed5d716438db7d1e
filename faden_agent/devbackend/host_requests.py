"""The reference backend's answer to a host request (`faden-agent cordon|drain|uncordon|gpu
forget|check|reset` on the machine): the command that does it, with an id derived from the
request so a re-sent record is answered once; an expired or malformed request gets none.
"""

from __future__ import annotations

import logging
from typing import Any

from faden_agent import protocol

log = logging.getLogger("faden_agent.devbackend")


def answer(data: dict[str, Any], now: float) -> tuple[str, dict[str, Any], str] | None:
    """(kind, spec, command id) of the command answering `data`; None when there is none to send."""
    action, request_id = data.get("action"), data.get("request_id")
    if action not in protocol.HOST_ACTIONS or not isinstance(request_id, str) or not 0 < len(request_id) <= 64:
        log.warning("host request ignored: action %s, request %s", protocol.quote(action), protocol.quote(request_id))
        return None
    expires_at = data.get("expires_at")
    if isinstance(expires_at, (int, float)) and expires_at < now:
        log.info("host request %s (%s) came after it expired: not answered", request_id, action)
        return None
    command_id = f"host-{request_id}"
    if action == "gpu.forget":
        uuid = data.get("uuid")
        if not isinstance(uuid, str) or not 0 < len(uuid) <= 96:
            log.warning("host request %s: gpu.forget without a GPU uuid", request_id)
            return None
        return "gpu.forget", {"request_id": request_id, "uuid": uuid}, command_id
    if action == "gpu.check":
        return "gpu.check", {"request_id": request_id, **_check_spec(data)}, command_id
    if action == "gpu.reset":
        uuid = data.get("uuid")
        if not isinstance(uuid, str) or not 0 < len(uuid) <= 96:
            log.warning("host request %s: gpu.reset without a GPU uuid", request_id)
            return None
        reset: dict[str, Any] = {
            "request_id": request_id,
            "gpu": uuid,
            "stop_containers": data.get("stop_containers") is True,
        }
        if _seconds(data.get("deadline_s")):
            reset["deadline_s"] = float(data["deadline_s"])
        return "gpu.reset", reset, command_id
    if action == "uncordon":
        return "node.undrain", {"request_id": request_id}, command_id
    spec: dict[str, Any] = {"request_id": request_id, "stop": action == "drain"}
    if action == "drain" and _seconds(data.get("deadline_s")):
        spec["deadline_s"] = float(data["deadline_s"])
    return "node.drain", spec, command_id


def _check_spec(data: dict[str, Any]) -> dict[str, Any]:
    """gpu.check's keys as the host asked them; what the CLI did not set is the agent's default."""
    spec: dict[str, Any] = {"allow_busy": data.get("allow_busy") is True}
    gpus = data.get("gpus")
    if isinstance(gpus, list) and gpus and all(isinstance(g, str) for g in gpus):
        spec["gpus"] = gpus[:64]
    if data.get("level") in (1, 2, 3, 4):
        spec["level"] = data["level"]
    for key in ("time_limit_s", "deadline_s"):
        if _seconds(data.get(key)):
            spec[key] = float(data[key])
    return spec


def _seconds(value: Any) -> bool:
    """A number of seconds a host request may ask for (the longest drain at most)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return ok and 0 < value <= protocol.MAX_DRAIN_DEADLINE_S
