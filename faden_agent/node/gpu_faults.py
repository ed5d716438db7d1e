"""The GPU evidence the inventory keeps on disk (gpu-evidence.json, written by
workers/inventory/gpu/evidence.py), read by any process: opened without following a link or
waiting on a FIFO, a regular file only, bounded, and checked field by field (`problem` names
the first wrong field). A file that fails is no evidence for a reader, never an exception.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from faden_agent.disk.files import Unusable, read_kept

EVIDENCE_FILE = "gpu-evidence.json"
MAX_BYTES = 1 << 20  # 64 GPUs of 16 Xids and a few counters are about 100 KiB
VERSION = 1
MAX_GPUS = 64
MAX_ENTRIES = 64  # Xids per log, containers per GPU, reasons per change
MAX_TEXT = 300
VERDICTS = ("ok", "degraded", "failed")
FUTURE_SLACK_S = 86400.0  # a time further ahead than this is no time this machine wrote
MAX_COUNT = 1 << 63


def read_evidence(state_dir: Path) -> dict[str, Any] | None:
    """The checked evidence; None without a file; Unusable (naming why) for any other file."""
    data: dict[str, Any] | None = read_kept(Path(state_dir) / EVIDENCE_FILE, MAX_BYTES, problem)
    return data


def read_gpus(state_dir: Path) -> dict[str, dict[str, Any]]:
    """uuid -> that GPU's evidence (index, xid, verdict, ...); {} without a usable file."""
    try:
        data = read_evidence(state_dir)
    except Unusable:
        return {}
    return data["gpus"] if data else {}


# --- the check, field by field


def problem(data: Any, now: float | None = None) -> str | None:
    """What makes `data` no evidence this agent wrote, naming the field; None when it is one."""
    try:
        _check(data, time.time() if now is None else now)
    except Unusable as exc:
        return str(exc)
    return None


def _check(data: Any, now: float) -> None:
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise Unusable(f"not a version-{VERSION} GPU evidence object")
    _text(data.get("kernel_cursor"), "kernel_cursor", optional=True)
    gpus = data.get("gpus")
    if not isinstance(gpus, dict) or len(gpus) > MAX_GPUS:
        raise Unusable(f"gpus is not an object of at most {MAX_GPUS} GPUs")
    for uuid, gpu in gpus.items():
        where = f"GPU {_quote(uuid)}"
        _text(uuid, "a GPU's uuid", limit=96)
        if not isinstance(gpu, dict):
            raise Unusable(f"{where} is not an object")
        _int(gpu.get("index"), f"{where}: index", 0, 4095)
        _text(gpu.get("pci_bus_id"), f"{where}: pci_bus_id", optional=True, limit=32)
        _time(gpu.get("seen_at"), f"{where}: seen_at", now, optional=True)
        if gpu.get("verdict") not in (None, *VERDICTS):
            raise Unusable(f"{where}: verdict is {_quote(gpu.get('verdict'))}")
        _change(gpu.get("verdict_change"), f"{where}: verdict_change", now)
        _log(gpu.get("xid", []), f"{where}: xid", now)
        _mapping(gpu.get("xid_totals", {}), f"{where}: xid_totals", lambda v, w: _int(v, w, 0, MAX_COUNT))
        _mapping(gpu.get("counters", {}), f"{where}: counters", lambda v, w: _int(v, w, 0, MAX_COUNT))
        _mapping(gpu.get("rose_at", {}), f"{where}: rose_at", lambda v, w: _time(v, w, now))
        _mapping(gpu.get("containers", {}), f"{where}: containers", lambda v, w: _time(v, w, now))
        _mapping(gpu.get("reset_view", {}), f"{where}: reset_view", _plain)
        links = gpu.get("links_up", [])
        if not isinstance(links, list) or len(links) > MAX_ENTRIES:
            raise Unusable(f"{where}: links_up is not a list of at most {MAX_ENTRIES}")
        for n, link in enumerate(links):
            _int(link, f"{where}: links_up[{n}]", 0, 63)
        _reset(gpu.get("last_reset"), f"{where}: last_reset", now)
        _last_check(gpu.get("last_check"), f"{where}: last_check", now)
    for name in ("switches", "unplaced"):
        logs = data.get(name, {})
        if not isinstance(logs, dict) or len(logs) > MAX_GPUS:
            raise Unusable(f"{name} is not an object of at most {MAX_GPUS} logs")
        for bus, log in logs.items():
            _text(bus, f"a bus id in {name}", limit=32)
            _log(log, f"{name} {_quote(bus)}", now)


def _log(entries: Any, where: str, now: float) -> None:
    if not isinstance(entries, list) or len(entries) > MAX_ENTRIES:
        raise Unusable(f"{where} is not a list of at most {MAX_ENTRIES}")
    for n, entry in enumerate(entries):
        at = f"{where}[{n}]"
        if not isinstance(entry, dict):
            raise Unusable(f"{at} is not an object")
        _text(entry.get("event"), f"{at}.event", limit=32)
        _int(entry.get("code"), f"{at}.code", 0, 1 << 31)
        _time(entry.get("at"), f"{at}.at", now)
        _text(entry.get("source", "nvml"), f"{at}.source", limit=16)
        _text(entry.get("boot"), f"{at}.boot", optional=True, limit=64)
        if "pid" in entry:
            _int(entry["pid"], f"{at}.pid", 0, 1 << 31)
        if "seq" in entry:
            _int(entry["seq"], f"{at}.seq", 0, MAX_COUNT)
        _text(entry.get("process"), f"{at}.process", optional=True, limit=64)
        _text(entry.get("container_id"), f"{at}.container_id", optional=True, limit=128)


def _change(change: Any, where: str, now: float) -> None:
    if change is None:
        return
    if not isinstance(change, dict) or change.get("new") not in VERDICTS or change.get("old") not in (None, *VERDICTS):
        raise Unusable(f"{where} is not an old/new verdict change")
    _time(change.get("at"), f"{where}.at", now)
    reasons = change.get("reasons")
    if not isinstance(reasons, list) or len(reasons) > MAX_ENTRIES:
        raise Unusable(f"{where}.reasons is not a list of at most {MAX_ENTRIES}")
    for n, reason in enumerate(reasons):
        _text(reason, f"{where}.reasons[{n}]")


def _reset(reset: Any, where: str, now: float) -> None:
    if reset is None:
        return
    if not isinstance(reset, dict):
        raise Unusable(f"{where} is not an object")
    _time(reset.get("at"), f"{where}.at", now)
    _text(reset.get("sign"), f"{where}.sign")
    _text(reset.get("boot"), f"{where}.boot", optional=True, limit=64)


def _last_check(check: Any, where: str, now: float) -> None:
    if check is None:
        return
    if not isinstance(check, dict):
        raise Unusable(f"{where} is not an object")
    _time(check.get("at"), f"{where}.at", now)
    _text(check.get("tool"), f"{where}.tool", limit=16)
    _int(check.get("level"), f"{where}.level", 0, 4)
    _text(check.get("outcome"), f"{where}.outcome", limit=16)
    _text(check.get("boot"), f"{where}.boot", optional=True, limit=64)
    if type(check.get("counted")) is not bool:
        raise Unusable(f"{where}.counted is not true or false")
    for name in ("failed", "warned"):
        tests = check.get(name, [])
        if not isinstance(tests, list) or len(tests) > MAX_ENTRIES:
            raise Unusable(f"{where}.{name} is not a list of at most {MAX_ENTRIES}")
        for n, test in enumerate(tests):
            _text(test, f"{where}.{name}[{n}]")


def _mapping(value: Any, where: str, check_value: Any) -> None:
    if not isinstance(value, dict) or len(value) > MAX_ENTRIES:
        raise Unusable(f"{where} is not an object of at most {MAX_ENTRIES}")
    for key, item in value.items():
        _text(key, f"a key of {where}", limit=128)
        check_value(item, f"{where}.{_quote(key)}")


def _plain(value: Any, where: str) -> None:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        _int(value, where, 0, MAX_COUNT)
    else:
        _text(value, where)


def _int(value: Any, where: str, low: int, high: int) -> None:
    if type(value) is not int or not low <= value <= high:
        raise Unusable(f"{where} is {_quote(value)}, not an integer from {low} to {high}")


def _time(value: Any, where: str, now: float, optional: bool = False) -> None:
    if value is None and optional:
        return
    ok = type(value) in (int, float) and math.isfinite(value) and 0 <= value <= now + FUTURE_SLACK_S
    if not ok:
        raise Unusable(f"{where} is {_quote(value)}, not a time of this machine")


def _text(value: Any, where: str, optional: bool = False, limit: int = MAX_TEXT) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or len(value) > limit:
        raise Unusable(f"{where} is {_quote(value)}, not a text of at most {limit} characters")


def _quote(value: Any) -> str:
    if type(value) is int and value.bit_length() > 64:
        return f"an int of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."
