"""GPU evidence that survives restarts (gpu-evidence.json in the state directory): per GPU
ever seen its index, bus id and when last seen, its last verdict, its Xid log and totals, counter
baselines; the kernel log's cursor. Written atomically (0600) only when it changed; bounded
(MAX_GPUS, MAX_BYTES); a corrupt file is moved aside, reported, and started afresh.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson

from faden_agent.disk.files import load_kept, replace_file_if_changed
from faden_agent.node.gpu_faults import EVIDENCE_FILE, MAX_BYTES
from faden_agent.protocol.metrics import GPU_VERDICTS

VERSION = 1
MAX_GPUS = 64
SEEN_GRAIN_S = 60  # "last seen" to the minute: a quiet GPU does not rewrite the file each round
log = logging.getLogger(__name__)


class Evidence:
    def __init__(self, state_dir: Path, read_only: bool = False):
        """read_only (doctor): a corrupt file is left where it is, for the agent to report."""
        self.path = Path(state_dir) / EVIDENCE_FILE
        self.read_only = read_only
        self.quarantined: dict[str, Any] | None = None  # the event when a corrupt file was moved aside
        self.gpus: dict[str, dict[str, Any]] = {}  # uuid -> what evidence() below writes
        self.kernel_cursor: str | None = None
        self._load()

    def _load(self) -> None:
        data, self.quarantined = load_kept(self.path, MAX_BYTES, problem, "GPU evidence", self.read_only)
        if isinstance(data, dict):
            self.gpus = dict(list(data["gpus"].items())[:MAX_GPUS])
            self.kernel_cursor = data.get("kernel_cursor")

    def save(self, gpus: dict[str, dict[str, Any]], kernel_cursor: str | None) -> bool:
        """Writes the evidence when it differs from the file's; True when written."""
        self.gpus = dict(list(gpus.items())[:MAX_GPUS])
        self.kernel_cursor = kernel_cursor
        data = {"version": VERSION, "gpus": self.gpus, "kernel_cursor": kernel_cursor}
        try:
            return replace_file_if_changed(self.path, orjson.dumps(data, option=orjson.OPT_SORT_KEYS))
        except OSError as exc:  # a full disk: the next round tries again
            log.warning("GPU evidence not saved: %s", exc)
            return False


def seen_at(now: float) -> int:
    return int(now) // SEEN_GRAIN_S * SEEN_GRAIN_S


def problem(data: Any) -> str | None:
    """What makes `data` no evidence file this agent wrote; None when it is one."""
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return "not a version-1 GPU evidence object"
    if not isinstance(data.get("gpus"), dict):
        return "gpus is not an object"
    if not isinstance(data.get("kernel_cursor"), str | None):
        return "kernel_cursor is not a string"
    for uuid, gpu in data["gpus"].items():
        if not isinstance(gpu, dict) or not isinstance(gpu.get("index"), int):
            return f"GPU {uuid[:64]!r} has no index"
        if not isinstance(gpu.get("xid", []), list) or not isinstance(gpu.get("counters", {}), dict):
            return f"GPU {uuid[:64]!r}: xid or counters of the wrong type"
        if not all(isinstance(x, dict) and isinstance(x.get("code"), int) for x in gpu.get("xid", [])):
            return f"GPU {uuid[:64]!r}: an Xid entry without a code"
    return None


def gather(
    probe: Any, verdicts: dict[str, str], changes: dict[str, dict[str, Any]] | None = None
) -> dict[str, dict[str, Any]]:
    """The evidence of every GPU seen: from the probe (GpuProbe), its health reader and Xid
    log, the last verdicts and verdict changes (HealthChanges; the executor's death causes
    read the changes, executor/death_cause.py)."""
    changes = changes or {}
    baselines = probe.health.baselines()
    logged = probe.health.xids.snapshot()
    return {
        uuid: {
            "index": seen["index"],
            "pci_bus_id": seen.get("pci_bus_id"),
            "seen_at": seen.get("at"),
            "verdict": verdicts.get(uuid),
            "verdict_change": changes.get(uuid),
            "xid": logged.get(uuid, []),
            "xid_totals": probe.health.xids.totals(uuid),
            **baselines.get(uuid, {}),
        }
        for uuid, seen in probe.seen.items()
    }


def restore(
    evidence: Evidence, probe: Any, verdicts: dict[str, str], changes: dict[str, dict[str, Any]] | None = None
) -> None:
    """Everything gather() kept, back where it lives (at the worker's start)."""
    for uuid, gpu in evidence.gpus.items():
        if changes is not None and isinstance(gpu.get("verdict_change"), dict):
            changes[uuid] = gpu["verdict_change"]
        probe.seen[uuid] = {"index": gpu["index"], "pci_bus_id": gpu.get("pci_bus_id"), "at": gpu.get("seen_at")}
        if gpu.get("verdict") in GPU_VERDICTS:
            verdicts[uuid] = gpu["verdict"]
        probe.health.xids.restore(uuid, gpu.get("xid") or [])
        probe.health.xids.restore_totals(uuid, gpu.get("xid_totals"))
        probe.health.restore(uuid, gpu)
