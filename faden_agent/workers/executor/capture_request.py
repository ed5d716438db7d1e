"""A serving container (one labelled with a metrics port) that died of a `hardware` cause:
the executor asks the inventory (which holds NVML) through its door (`capture`) for a capture
of its GPUs' state and last lines; the answer, given at once, is the event's `capture`. No
inventory or no answer within ASK_TIMEOUT_S: the event goes out without one."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from faden_agent import protocol
from faden_agent.ipc import inventory_door as door
from faden_agent.protocol.capture import CaptureQuestion

ASK_TIMEOUT_S = 1.0
log = logging.getLogger(__name__)


def ask_capture(runtime_dir: Path, record_id: str, data: dict[str, Any], attrs: dict[str, Any] | None) -> Any:
    """The event's `capture` for a hardware death of a serving container; None otherwise."""
    labels = ((attrs or {}).get("Config") or {}).get("Labels") or {}
    if data.get("suspected") != "hardware" or not labels.get(protocol.LABEL_METRICS_PORT):
        return None
    body: CaptureQuestion = {
        "record_id": record_id,
        "container_id": data["container_id"],
        "name": data.get("name"),
        "cluster": data.get("cluster"),
        "workload": data.get("workload"),
        "time": data["time"],
        "gpus": data.get("gpus") or [],
    }
    answer = door.ask(runtime_dir, door.CAPTURE, body, timeout_s=ASK_TIMEOUT_S)
    capture = (answer or {}).get("capture")
    if not isinstance(capture, dict):
        log.warning("no capture from the inventory for %s: %s", data.get("name"), (answer or {}).get("error"))
        return None
    return capture
