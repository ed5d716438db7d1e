"""The GPU evidence the inventory keeps on disk (gpu-evidence.json, written by
workers/inventory/gpu/evidence.py), read by other processes: which GPUs this machine has
(uuid -> index) and their Xids with times. Read-only, bounded, tolerant: an unreadable
file is no evidence, never an error of the reader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

EVIDENCE_FILE = "gpu-evidence.json"
MAX_BYTES = 1 << 20  # 64 GPUs of 16 Xids and a few counters are about 100 KiB


def read_gpus(state_dir: Path) -> dict[str, dict[str, Any]]:
    """uuid -> {"index", "xid": [{"event", "code", "at", ...}], "verdict"}; {} without a file."""
    try:
        with open(Path(state_dir) / EVIDENCE_FILE, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
        data = orjson.loads(raw) if len(raw) <= MAX_BYTES else None
    except (OSError, orjson.JSONDecodeError):
        return {}
    gpus = data.get("gpus") if isinstance(data, dict) else None
    if not isinstance(gpus, dict):
        return {}
    return {uuid: gpu for uuid, gpu in gpus.items() if isinstance(gpu, dict) and isinstance(gpu.get("index"), int)}
