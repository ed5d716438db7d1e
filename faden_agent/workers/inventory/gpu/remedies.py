"""The inventory's remedy jobs behind its door: one check or reset at a time, each in a thread of
its own, read step by step by the executor (`gpu.job`) and ended on `gpu.cancel` or the worker's
stop (the programs' process groups with it). What a job killed mid-way left (a program group,
persistence mode off) is undone at the worker's next start. The last jobs' ends are kept.
"""

from __future__ import annotations

import logging
import os
import uuid as uuids
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from faden_agent.common import programs
from faden_agent.ipc import inventory_door as door
from faden_agent.workers.inventory.gpu import smi
from faden_agent.workers.inventory.gpu.checks import run_check
from faden_agent.workers.inventory.gpu.remedy import Job, Tools
from faden_agent.workers.inventory.gpu.resets import PERSISTENCE_BOUND_S, run_reset

KEPT_ENDS = 16
MAX_TIME_LIMIT_S = 6 * 3600.0  # a level-4 diagnostic takes hours; nothing here more
GROUP_FILE = "gpu-remedy.pgid"  # in the runtime directory: the program group of a running job
PERSISTENCE_FILE = "gpu-remedy.persistence"  # the bus id of a GPU whose persistence mode a reset turned off
log = logging.getLogger(__name__)


def _busy(given: Any, asked: list[str]) -> dict[str, list[str]]:
    """uuid -> what runs on it, of the GPUs asked (bounded; anything else left out)."""
    if not isinstance(given, dict):
        return {}
    return {
        uuid: [str(name)[:120] for name in names][:32]
        for uuid, names in given.items()
        if uuid in asked and isinstance(names, list)
    }


class Remedies:
    def __init__(self, tools: Tools, start_thread: Callable[..., Any], runtime_dir: Path):
        self.tools = tools
        self.start_thread = start_thread
        self.group_file = Path(runtime_dir) / GROUP_FILE
        self.persistence_file = Path(runtime_dir) / PERSISTENCE_FILE
        self.current: Job | None = None
        self.ended: OrderedDict[str, Job] = OrderedDict()
        tools.remember_group = self._remember_group
        tools.remember_persistence = self._remember_persistence
        self.leftover = self._end_leftover()
        self.restoring = self._restore_persistence()

    def start(self, kind: str, body: dict[str, Any]) -> door.StartAnswer:
        if self.current is not None and not self.current.done:
            running = self.current
            return {"outcome": "busy", "job": None, "message": f"a {running.kind} runs ({running.id}): one at a time"}
        try:
            limit = float(body.get("time_limit_s") or 0)
        except (TypeError, ValueError):
            limit = 0.0
        if not 0 < limit <= MAX_TIME_LIMIT_S:
            return {"outcome": "unknown", "job": None, "message": f"time_limit_s must be in (0, {MAX_TIME_LIMIT_S:g}]"}
        known = self.tools.devices()
        if kind == door.GPU_CHECK:
            listed = body.get("uuids")
            asked = [u for u in listed if isinstance(u, str)][:64] if isinstance(listed, list) else []
            unknown = [u for u in asked if u not in known]
            if not asked or unknown:
                said = ", ".join(unknown) or "none asked"
                return {"outcome": "unknown", "job": None, "message": f"no such GPU here: {said}"[:600]}
            busy = _busy(body.get("busy"), asked)
            level = int(body["level"]) if body.get("level") in (1, 2, 3, 4) else 1
            target: Callable[[Job], None] = lambda job: run_check(self.tools, job, asked, level, busy)  # noqa: E731
        else:
            uuid = body.get("uuid")
            if not isinstance(uuid, str) or uuid not in known:
                return {"outcome": "unknown", "job": None, "message": f"no such GPU here: {str(uuid)[:96]}"}
            command_id = str(body.get("command_id") or "")[:128]
            target = lambda job: run_reset(self.tools, job, uuid, command_id)  # noqa: E731
        job = Job(uuids.uuid4().hex[:16], kind, limit)
        self.current = job
        self.start_thread(f"gpu-{kind.split('.')[-1]}", self._run, job, target, critical=False, finite=True)
        return {"outcome": "started", "job": job.id, "message": f"{kind} started"}

    def poll(self, job_id: str, since: int) -> door.JobAnswer:
        job = self._find(job_id)
        if job is None:
            return {"state": "unknown", "steps": [], "next": since, "end": None}
        steps = job.steps_since(since)
        end = cast(door.JobEnd | None, job.end)
        return {"state": "done" if job.done else "running", "steps": steps, "next": since + len(steps), "end": end}

    def cancel(self, job_id: str) -> door.CancelAnswer:
        job = self._find(job_id)
        if job is None or job.done:
            return {"cancelled": False}
        job.stop.set()
        return {"cancelled": True}

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop.set()

    def _find(self, job_id: str) -> Job | None:
        if self.current is not None and self.current.id == job_id:
            return self.current
        return self.ended.get(job_id)

    def _run(self, job: Job, target: Callable[[Job], None]) -> None:
        try:
            target(job)
        except Exception as exc:  # noqa: BLE001 - a job's surprise is its end, never the worker's
            log.exception("%s %s failed", job.kind, job.id)
            job.finish(False, "internal_error", f"{job.kind}: {type(exc).__name__}: {exc}"[:300])
        finally:
            job.finish(False, "internal_error", f"{job.kind} ended without an outcome")  # no-op once ended
            self._forget_group()
            self.ended[job.id] = job
            while len(self.ended) > KEPT_ENDS:
                self.ended.popitem(last=False)

    # --- what a job changed, for the next start after a crash

    def _remember_persistence(self, bus: str | None) -> None:
        try:
            if bus is None:
                self.persistence_file.unlink(missing_ok=True)
            else:
                self.persistence_file.write_text(f"{bus}\n")
        except OSError as exc:
            log.warning("could not note persistence mode of %s: %s", bus, exc)

    def _restore_persistence(self) -> str | None:
        """Turns persistence mode on again (in a thread: nvidia-smi may hang) on the GPU an
        earlier run turned it off for and did not see back; its bus id, if there was one."""
        try:
            bus = self.persistence_file.read_text()[:64].strip()
        except OSError:
            return None
        if not bus or not all(c in "0123456789abcdefABCDEF:." for c in bus):
            self._remember_persistence(None)
            return None

        def restore() -> None:
            ran = programs.run(smi.persistence_command(self.tools.nvidia_smi, bus, True), PERSISTENCE_BOUND_S)
            log.warning("persistence mode of %s, left off by a reset of an earlier run: %s", bus, smi.said(ran))
            self._remember_persistence(None)

        self.start_thread("gpu-persistence", restore, critical=False, finite=True)
        return bus

    def _remember_group(self, pgid: int) -> None:
        try:
            self.group_file.write_text(f"{pgid} {programs.start_time(pgid)}\n")
        except OSError as exc:
            log.warning("could not note the program group %d: %s", pgid, exc)

    def _forget_group(self) -> None:
        try:
            self.group_file.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("could not remove %s: %s", self.group_file, exc)

    def _end_leftover(self) -> int | None:
        """Ends the program group an earlier run noted and did not see end; its id, if one was."""
        try:
            words = self.group_file.read_text()[:64].split()
        except OSError:
            return None
        self._forget_group()
        if len(words) != 2 or not all(w.isdigit() for w in words) or int(words[0]) == os.getpgrp():
            return None
        if programs.end_leftover(int(words[0]), int(words[1])):
            log.warning("ended process group %s, left by a GPU check or reset of an earlier run", words[0])
            return int(words[0])
        return None
