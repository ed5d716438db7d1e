"""GPU evidence that survives restarts (gpu-evidence.json in the state directory): per GPU
ever seen its index, bus id and when last seen, its last verdict and change, its Xid log and
totals, counter baselines, its last reset and the containers seen on it; the NVSwitch and
unplaced Xid logs; the kernel log's position. Written atomically (0600) only when it changed;
bounded; a file with any wrong field (node/gpu_faults.py) is moved aside, reported, replaced.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson

from faden_agent.disk.files import load_kept, replace_file
from faden_agent.node.gpu_faults import EVIDENCE_FILE, MAX_BYTES, MAX_GPUS, VERSION, problem
from faden_agent.workers.inventory.gpu.xids import SWITCH, UNPLACED

SEEN_GRAIN_S = 60  # "last seen" to the minute: a quiet GPU does not rewrite the file each round
log = logging.getLogger(__name__)


class Evidence:
    def __init__(self, state_dir: Path, read_only: bool = False):
        """read_only (doctor): a corrupt file is left where it is, for the agent to report."""
        self.path = Path(state_dir) / EVIDENCE_FILE
        self.read_only = read_only
        self.quarantined: dict[str, Any] | None = None  # the event when a corrupt file was moved aside
        self.data: dict[str, Any] = empty()
        self._written: bytes | None = None  # what this process last wrote (or read): a change is written
        self._load()

    @property
    def gpus(self) -> dict[str, dict[str, Any]]:
        return self.data["gpus"]

    @property
    def kernel_cursor(self) -> str | None:
        return self.data.get("kernel_cursor")

    def _load(self) -> None:
        data, self.quarantined = load_kept(self.path, MAX_BYTES, problem, "GPU evidence", self.read_only)
        if data is not None:
            self.data = data

    def save(self, data: dict[str, Any]) -> bool:
        """Writes `data` (gather()'s) when it differs from what this process last wrote; True when written."""
        self.data = data
        raw = orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
        if raw == self._written:
            return False
        try:
            replace_file(self.path, raw)  # a rename: whatever was at the path (a FIFO, a link) is replaced
        except OSError as exc:  # a full disk: the next round tries again
            log.warning("GPU evidence not saved: %s", exc)
            return False
        self._written = raw
        return True


def empty() -> dict[str, Any]:
    return {"version": VERSION, "gpus": {}, "kernel_cursor": None, "switches": {}, "unplaced": {}}


def seen_at(now: float) -> int:
    return int(now) // SEEN_GRAIN_S * SEEN_GRAIN_S


def gather(
    probe: Any,
    verdicts: dict[str, str],
    changes: dict[str, dict[str, Any]] | None = None,
    kernel_cursor: str | None = None,
) -> dict[str, Any]:
    """The evidence file's content: every GPU seen, from the probe (GpuProbe), its health
    reader, Xid log and holds, the last verdicts and verdict changes (HealthChanges; the
    executor's death causes read them, executor/death_cause.py)."""
    changes = changes or {}
    baselines = probe.health.baselines()
    xids = probe.health.xids
    logged = xids.snapshot()
    gpus = {
        uuid: {
            "index": seen["index"],
            "pci_bus_id": seen.get("pci_bus_id"),
            "seen_at": seen.get("at"),
            "verdict": verdicts.get(uuid),
            "verdict_change": changes.get(uuid),
            "xid": logged.get(uuid, []),
            "xid_totals": xids.totals(uuid),
            "containers": dict(probe.users.get(uuid, {})),
            **baselines.get(uuid, {}),
        }
        for uuid, seen in list(probe.seen.items())[:MAX_GPUS]
    }
    return {
        "version": VERSION,
        "gpus": gpus,
        "kernel_cursor": kernel_cursor,
        "switches": dict(xids.by_bus(SWITCH)[:MAX_GPUS]),
        "unplaced": dict(xids.by_bus(UNPLACED)[:MAX_GPUS]),
    }


def restore(
    evidence: Evidence, probe: Any, verdicts: dict[str, str], changes: dict[str, dict[str, Any]] | None = None
) -> None:
    """Everything gather() kept, back where it lives (at the worker's start)."""
    xids = probe.health.xids
    for uuid, gpu in evidence.gpus.items():
        if changes is not None and gpu.get("verdict_change") is not None:
            changes[uuid] = gpu["verdict_change"]
        probe.seen[uuid] = {"index": gpu["index"], "pci_bus_id": gpu.get("pci_bus_id"), "at": gpu.get("seen_at")}
        probe.users[uuid] = dict(gpu.get("containers") or {})
        if gpu.get("verdict") is not None:
            verdicts[uuid] = gpu["verdict"]
        xids.restore(uuid, gpu.get("xid") or [])
        xids.restore_totals(uuid, gpu.get("xid_totals"))
        probe.health.restore(uuid, gpu)
    for prefix, logs in ((SWITCH, evidence.data.get("switches")), (UNPLACED, evidence.data.get("unplaced"))):
        for bus, entries in (logs or {}).items():
            xids.restore(prefix + bus, entries)
