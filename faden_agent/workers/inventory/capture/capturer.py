"""Captures, one at a time on a thread started when one is asked for: a job (the event that
asked, its container) -> the container's stacks, a fresh collection's GPU state, its last
log lines -> fitted to the byte cap and put down for the log worker (node/captures.py) ->
the job's callback with the summary. One capture per id (the event's), also across restarts;
at most MAX_QUEUED jobs wait; CAPTURE_S bounds one capture."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faden_agent.common.errorline import error_line
from faden_agent.engine import containers
from faden_agent.engine.client import EngineClient
from faden_agent.node import captures
from faden_agent.protocol.capture import CaptureSummary
from faden_agent.protocol.status import CaptureLast, CapturesStatus
from faden_agent.workers.inventory.capture import document
from faden_agent.workers.inventory.capture.gpus import container_gpus, gpu_state, verdicts
from faden_agent.workers.inventory.capture.stacks import capture_stacks

log = logging.getLogger(__name__)

MAX_QUEUED = 4
CAPTURE_S = 20.0  # one capture, from its start to its line put down
STACKS_S = 12.0  # of it, the stacks (py-spy)
GPU_WAIT_S = 15.0  # of it, until the collection asked for at its start is there
LOG_LINES = 100
LOG_LINE_CHARS = 1000
LOG_BYTES = 4 << 20  # of the log's tail, at most this much is read: 100 long lines fit many times over

# Asks the collection loop for a round now; the waiter returns (sections, fresh) by a deadline.
Refresh = Callable[[], Callable[[float], tuple[dict[str, Any], bool]]]


@dataclass
class Job:
    capture_id: str
    trigger: str  # the event type that asked: workload.stalled, container.die
    container: dict[str, Any]  # id, name, cluster, workload
    at: float  # the event's time
    done: Callable[[CaptureSummary], Any]  # called with the summary once the capture is put down
    gpus: list[dict[str, Any]] = field(default_factory=list)  # [{index, uuid}] the asker knows of


class Capturer:
    def __init__(
        self,
        state_dir: Path,
        max_bytes: int,
        xid_window_s: float,
        docker_host: str | None,
        refresh: Refresh,
        last_sections: Callable[[], dict[str, Any]],
        start_thread: Callable[..., threading.Thread],
    ):
        self.state_dir = state_dir
        self.max_bytes = max_bytes
        self.xid_window_s = xid_window_s
        self.docker_host = docker_host
        self.refresh = refresh
        self.last_sections = last_sections
        self.start_thread = start_thread
        self._lock = threading.Lock()
        self._jobs: deque[Job] = deque()
        self._running = False
        self._taken: list[str] | None = None  # read from disk at the first job
        self.taken_count = 0
        self.last: CaptureLast | None = None

    def submit(self, job: Job) -> str | None:
        """None: the job will run (its callback follows); else why it will not."""
        with self._lock:
            if self._taken is None:
                self._taken = captures.taken(self.state_dir)
            if job.capture_id in self._taken or any(j.capture_id == job.capture_id for j in self._jobs):
                return "captured already"
            if len(self._jobs) >= MAX_QUEUED:
                return f"{MAX_QUEUED} captures wait already"
            self._jobs.append(job)
            if not self._running:
                self._running = True
                self.start_thread("inventory-capture", self._run, finite=True)
        return None

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._jobs:
                    self._running = False
                    return
                job = self._jobs.popleft()
            summary = self.capture(job)
            try:
                job.done(summary)
            except Exception:  # noqa: BLE001 - e.g. the outbox's disk is full: the next job still runs
                log.exception("the event of capture %s was not sent", job.capture_id)

    def capture(self, job: Job) -> CaptureSummary:
        """The capture of one job, put down for the log worker; its summary (never raises)."""
        started = time.monotonic()
        doc: dict[str, Any] = {
            "capture_id": job.capture_id,
            "trigger": job.trigger,
            "event_time": job.at,
            "time": time.time(),
            "container": job.container,
        }
        size: int | None = None
        try:
            self._remember(job.capture_id)
            self._gather(job, doc, started)
            brief = document.summary(doc)
            line = document.fit(doc, self.max_bytes)
            captures.keep(self.state_dir, job.capture_id, line)
            size = len(line)
        except Exception as exc:  # noqa: BLE001 - a capture that fails is told, never fatal
            brief = document.summary({**doc, "stacks": doc.get("stacks") or {}})
            brief["error"] = error_line(exc, 300, named=True)
            log.warning("capture %s of %s failed: %s", job.capture_id, job.container.get("name"), brief["error"])
        seconds = round(time.monotonic() - started, 2)
        self.last = {
            "id": job.capture_id,
            "bytes": size,
            "stacks": brief["stacks"],
            "error": brief.get("error"),
            "seconds": seconds,
        }
        self.taken_count += 1
        log.warning(
            "captured %s for %s of %s in %.1f s: stacks %s",
            job.capture_id,
            job.trigger,
            job.container.get("name"),
            seconds,
            brief["stacks"],
        )
        return brief

    def _remember(self, capture_id: str) -> None:
        """Noted before it is taken: a crash mid-capture does not capture the same event twice."""
        with self._lock:
            assert self._taken is not None
            self._taken = [*self._taken, capture_id][-captures.MAX_TAKEN :]
        captures.note_taken(self.state_dir, capture_id)

    def _gather(self, job: Job, doc: dict[str, Any], started: float) -> None:
        container_id = job.container["id"]
        collected = self.refresh()  # the GPUs are read while py-spy runs
        doc["stacks"] = capture_stacks(container_id, started + STACKS_S)
        sections, fresh = collected(started + GPU_WAIT_S)
        devices = container_gpus(sections, container_id, job.gpus)
        doc["gpus"] = [gpu_state(device, time.time(), self.xid_window_s) for device in devices]
        doc["gpu_probe"] = {**((sections.get("probes") or {}).get("gpu") or {}), "fresh": fresh}
        doc["logs"] = self._logs(container_id, started + CAPTURE_S)

    def _logs(self, container_id: str, deadline: float) -> dict[str, Any]:
        left = deadline - time.monotonic()
        if left <= 0.5:
            return {"lines": [], "error": "the capture's time ran out before them"}
        client = None
        try:
            client = EngineClient(self.docker_host, timeout_s=left)
            container = containers.get(client, container_id)  # its Config.Tty: is the log framed?
            stream = container.logs(stdout=True, stderr=True, tail=LOG_LINES, timestamps=True)
            raw = stream.read_all(LOG_BYTES)
        except Exception as exc:  # noqa: BLE001 - gone, or a log driver without reads
            return {"lines": [], "error": error_line(exc, 300, named=True)}
        finally:
            if client is not None:
                client.close()
        text = raw.decode(errors="replace")
        lines = [line[:LOG_LINE_CHARS] for line in text.splitlines()[-LOG_LINES:]]
        return {"lines": lines, "error": f"the log was cut: {stream.broken}" if stream.broken else None}

    def brief_now(self, capture_id: str, container_id: str, named: list[dict[str, Any]]) -> CaptureSummary:
        """A summary before the capture runs (a death: no process left to dump), from the
        last collection's verdicts."""
        sections = self.last_sections()
        gpus = [gpu_state(d, time.time(), self.xid_window_s) for d in container_gpus(sections, container_id, named)]
        return {
            "id": capture_id,
            "stacks": "no_process",
            "reason": "the container had exited",
            "thread": None,
            "pid": None,
            "top_frames": [],
            "gpus": verdicts(gpus),
        }

    def status(self) -> CapturesStatus:
        with self._lock:
            queued = len(self._jobs)
        return {"taken": self.taken_count, "queued": queued, "last": self.last}
