"""One capture as it goes to Loki (one JSON line) and as the event sums it up. fit() cuts it
to the byte cap in a fixed order, least telling first (old log lines, other threads' frames,
other processes, GPU process lists, then everything but the busiest thread's top frames and
the GPUs' verdicts) and names each cut; the summary is the busiest thread's top frames."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from faden_agent.protocol.capture import CaptureSummary
from faden_agent.workers.inventory.capture.gpus import verdicts

TOP_FRAMES = 5  # of the busiest thread, in the event's summary
MIN_LOG_LINES = 10


def size(document: dict[str, Any]) -> int:
    return len(orjson.dumps(document))


def _other_threads(document: dict[str, Any]) -> list[dict[str, Any]]:
    busiest = (document.get("stacks") or {}).get("busiest") or {}
    return [
        thread
        for process in (document.get("stacks") or {}).get("processes") or ()
        for thread in process.get("threads") or ()
        if not (process["pid"] == busiest.get("pid") and thread["name"] == busiest.get("thread"))
    ]


def _fewer_log_lines(document: dict[str, Any]) -> bool:
    lines = (document.get("logs") or {}).get("lines") or []
    if len(lines) <= MIN_LOG_LINES:
        return False
    document["logs"]["lines"] = lines[len(lines) // 2 :]  # the newest half
    return True


def _short_other_frames(document: dict[str, Any]) -> bool:
    cut = False
    for thread in _other_threads(document):
        if len(thread["frames"]) > 3:
            thread["frames"], cut = thread["frames"][:3], True
    return cut


def _no_other_frames(document: dict[str, Any]) -> bool:
    cut = False
    for thread in _other_threads(document):
        if thread["frames"]:
            thread["frames"], cut = [], True
    return cut


def _busiest_process_only(document: dict[str, Any]) -> bool:
    stacks = document.get("stacks") or {}
    busiest = (stacks.get("busiest") or {}).get("pid")
    processes = stacks.get("processes") or []
    kept = [p for p in processes if p["pid"] == busiest or p.get("status") != "ok"][:4]
    if len(kept) == len(processes):
        return False
    stacks["processes"] = kept
    return True


def _no_gpu_processes(document: dict[str, Any]) -> bool:
    cut = False
    for gpu in document.get("gpus") or ():
        if gpu.get("processes"):
            gpu["processes"], cut = [], True
    return cut


def _no_log_lines(document: dict[str, Any]) -> bool:
    if not (document.get("logs") or {}).get("lines"):
        return False
    document["logs"]["lines"] = []
    return True


def _bare(document: dict[str, Any]) -> bool:
    """The last resort: the busiest thread's top frames and each GPU's verdict."""
    stacks = document.get("stacks") or {}
    busiest = stacks.get("busiest")
    if busiest:
        busiest["frames"] = [frame[:200] for frame in busiest["frames"][:TOP_FRAMES]]
    document["stacks"] = {"status": stacks.get("status"), "reason": (stacks.get("reason") or "")[:300] or None}
    document["stacks"]["busiest"] = busiest
    document["gpus"] = verdicts(document.get("gpus") or [])
    return True


CUTS: tuple[tuple[str, Callable[[dict[str, Any]], bool]], ...] = (
    ("older_log_lines", _fewer_log_lines),
    ("other_threads_frames_to_3", _short_other_frames),
    ("other_threads_frames", _no_other_frames),
    ("other_processes", _busiest_process_only),
    ("gpu_processes", _no_gpu_processes),
    ("log_lines", _no_log_lines),
    ("all_but_the_busiest_thread_and_verdicts", _bare),
)


def fit(document: dict[str, Any], max_bytes: int) -> bytes:
    """The document as one JSON line of at most `max_bytes`, cut in CUTS' order (each
    cut named in `cut`, with the size it had)."""
    body = orjson.dumps(document)
    if len(body) <= max_bytes:
        return body
    document["cut"] = {"from_bytes": len(body), "parts": []}
    for name, cut in CUTS:
        while len(body) > max_bytes and cut(document):
            if name not in document["cut"]["parts"]:
                document["cut"]["parts"].append(name)
            body = orjson.dumps(document)
            if name == "all_but_the_busiest_thread_and_verdicts":
                break
        if len(body) <= max_bytes:
            return body
    return orjson.dumps({k: document.get(k) for k in ("capture_id", "trigger", "time", "container", "cut")})


def summary(document: dict[str, Any]) -> CaptureSummary:
    """The event's `capture`: id, the stacks' outcome, the busiest thread's top frames, the
    GPUs' verdicts."""
    stacks = document.get("stacks") or {}
    busiest = stacks.get("busiest") or {}
    return {
        "id": document["capture_id"],
        "stacks": stacks.get("status"),
        "reason": stacks.get("reason"),
        "thread": busiest.get("thread"),
        "pid": busiest.get("pid"),
        "top_frames": list(busiest.get("frames") or ())[:TOP_FRAMES],
        "gpus": verdicts(document.get("gpus") or []),
    }
