"""The Python stacks of one container's processes: its processes from /proc (their cgroup
names it), Python ones first, each dumped by py-spy (pyspy.py) within the capture's deadline,
and each thread's CPU over a short window to name the busiest thread. Bounded: at most
MAX_PROCESSES dumped, MAX_THREADS threads and MAX_FRAMES frames each kept."""

from __future__ import annotations

import os
import time
from typing import Any

from faden_agent.workers.inventory.capture import pyspy
from faden_agent.workers.inventory.gpu.containers import container_of_pid

MAX_PROCESSES = 8
MAX_THREADS = 64
MAX_FRAMES = 40
MAX_SCAN = 1 << 16  # /proc entries looked at
MAX_MAPS_BYTES = 1 << 20
CPU_WINDOW_S = 0.3  # each thread's CPU over this long names the busiest
DUMP_TIMEOUT_S = 5.0  # one py-spy run


def container_pids(container_id: str, proc_root: str = "/proc") -> list[int]:
    """The host pids of the container's processes, lowest first."""
    found = []
    with os.scandir(proc_root) as entries:
        for count, entry in enumerate(entries):
            if count >= MAX_SCAN:
                break
            if entry.name.isdigit() and container_of_pid(int(entry.name), proc_root) == container_id:
                found.append(int(entry.name))
    return sorted(found)


def runs_python(pid: int, proc_root: str = "/proc") -> bool | None:
    """Whether the process runs a Python interpreter (its executable, or libpython mapped);
    None when /proc does not tell (no ptrace access to it)."""
    try:
        if "python" in os.path.basename(os.readlink(f"{proc_root}/{pid}/exe")):
            return True
        with open(f"{proc_root}/{pid}/maps", "rb") as fh:
            return b"libpython" in fh.read(MAX_MAPS_BYTES)
    except OSError:
        return None


def command_name(pid: int, proc_root: str = "/proc") -> str | None:
    try:
        with open(f"{proc_root}/{pid}/comm", encoding="utf-8", errors="replace") as fh:
            return fh.read(64).strip() or None
    except OSError:
        return None


def thread_ticks(pid: int, proc_root: str = "/proc") -> dict[int, int]:
    """Host tid -> CPU ticks (user + system) of each thread of the process."""
    ticks = {}
    try:
        tids = [int(name) for name in os.listdir(f"{proc_root}/{pid}/task") if name.isdigit()][: MAX_THREADS * 16]
    except OSError:
        return {}
    for tid in tids:
        try:
            with open(f"{proc_root}/{pid}/task/{tid}/stat", "rb") as fh:
                fields = fh.read(4096).rpartition(b")")[2].split()
            ticks[tid] = int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return ticks


def namespace_tids(pid: int, tids: list[int], proc_root: str = "/proc") -> dict[int, int]:
    """The tid each thread has in the container's PID namespace (py-spy names threads so)
    -> its host tid, from NSpid."""
    mapped = {}
    for tid in tids:
        try:
            with open(f"{proc_root}/{pid}/task/{tid}/status", encoding="ascii", errors="replace") as fh:
                line = next((line for line in fh if line.startswith("NSpid:")), "")
            inner = line.split()[-1] if line.split()[1:] else str(tid)
            mapped[int(inner)] = tid
        except (OSError, ValueError):
            continue
    return mapped


def frame_text(frame: Any) -> str:
    if not isinstance(frame, dict):
        return "?"
    name = str(frame.get("name") or "?")[:200]
    where = str(frame.get("short_filename") or frame.get("filename") or "?")[:200]
    return f"{name} ({where}:{frame.get('line') or 0})"


def capture_stacks(container_id: str, deadline: float, proc_root: str = "/proc") -> dict[str, Any]:
    """The container's stacks as the capture holds them (docs/inventory.md, Evidence at a stall)."""
    pids = container_pids(container_id, proc_root)
    if not pids:
        return {"status": "no_process", "reason": "the container has no process (it is not running)"}
    kinds = {pid: runs_python(pid, proc_root) for pid in pids}
    candidates = [p for p in pids if kinds[p]] + [p for p in pids if kinds[p] is None]
    if not candidates:
        return {"status": "no_python", "reason": f"none of its {len(pids)} processes runs Python"}
    before = {pid: thread_ticks(pid, proc_root) for pid in candidates[:MAX_PROCESSES]}
    time.sleep(max(0.0, min(CPU_WINDOW_S, deadline - time.monotonic() - 1.0)))
    processes = []
    for pid in candidates[:MAX_PROCESSES]:
        left = deadline - time.monotonic()
        if left <= 0.2:
            processes.append({"pid": pid, "status": "timeout", "reason": "the capture's time ran out before it"})
            continue
        processes.append(_one(pid, before[pid], min(DUMP_TIMEOUT_S, left), proc_root))
    dumped = [p for p in processes if p["status"] == "ok"]
    first_failure = next((p for p in processes if p["status"] != "ok"), None)
    status = "ok" if dumped else (first_failure or {}).get("status", "failed")
    reason = None if dumped else (first_failure or {}).get("reason")
    skipped = len(candidates) - len(processes)
    return {
        "status": status,
        "reason": reason,
        "processes": processes,
        "busiest": busiest(dumped),
        **({"not_dumped": skipped} if skipped > 0 else {}),
    }


def _one(pid: int, ticks_before: dict[int, int], timeout_s: float, proc_root: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"pid": pid, "comm": command_name(pid, proc_root)}
    try:
        threads = pyspy.dump(pid, timeout_s)
    except pyspy.DumpFailed as exc:
        return {**entry, "status": exc.reason, "reason": str(exc)}
    ticks_after = thread_ticks(pid, proc_root)
    host_tid = namespace_tids(pid, list(ticks_after), proc_root)
    hz = os.sysconf("SC_CLK_TCK")
    kept = []
    for thread in threads[:MAX_THREADS]:
        inner = thread.get("os_thread_id")
        tid = host_tid.get(inner, inner) if isinstance(inner, int) else None
        used = ticks_after.get(tid, 0) - ticks_before.get(tid, ticks_after.get(tid, 0)) if tid is not None else 0
        kept.append(
            {
                "name": str(thread.get("thread_name") or thread.get("thread_id"))[:100],
                "tid": tid,
                "cpu_s": round(max(used, 0) / hz, 2),
                "active": bool(thread.get("active")),
                "gil": bool(thread.get("owns_gil")),
                "frames": [frame_text(f) for f in (thread.get("frames") or [])[:MAX_FRAMES]],
            }
        )
    native_error = threads[0].get("native_error") if threads else None
    return {
        **entry,
        "status": "ok",
        "native": native_error is None,
        **({"native_error": native_error} if native_error else {}),
        "threads": kept,
        **({"threads_not_kept": len(threads) - MAX_THREADS} if len(threads) > MAX_THREADS else {}),
    }


def busiest(processes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The thread with the most CPU in the window (then the GIL holder, then an active one)."""
    ranked = [
        ((thread["cpu_s"], thread["gil"], thread["active"], len(thread["frames"])), process, thread)
        for process in processes
        for thread in process.get("threads") or ()
    ]
    if not ranked:
        return None
    _, process, thread = max(ranked, key=lambda item: item[0])
    return {"pid": process["pid"], "comm": process.get("comm"), "thread": thread["name"], "frames": thread["frames"]}
