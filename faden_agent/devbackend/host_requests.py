"""The reference backend's answer to a host request (`faden-agent cordon|drain|uncordon|gpu
forget` on the machine): the command that does it, with an id derived from the request so a
re-sent record is answered once; an expired or malformed request gets none.
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
    if action == "uncordon":
        return "node.undrain", {"request_id": request_id}, command_id
    spec: dict[str, Any] = {"request_id": request_id, "stop": action == "drain"}
    deadline = data.get("deadline_s")
    if action == "drain" and isinstance(deadline, (int, float)) and 0 < deadline <= protocol.MAX_DRAIN_DEADLINE_S:
        spec["deadline_s"] = float(deadline)
    return "node.drain", spec, command_id
