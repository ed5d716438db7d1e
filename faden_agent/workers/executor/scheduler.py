"""Who runs when: commands on the same container (or image) in arrival order, different
ones in parallel on a thread pool, image pulls bounded by a semaphore; cancellation and
deadlines are flags a running job checks between Docker calls, plus abort hooks that
close its in-flight HTTP response so a blocked read returns at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from faden_agent.protocol.status import QueueCounts
    from faden_agent.workers.executor.kinds import CommandKind

log = logging.getLogger(__name__)

MAX_THREADS = 32


class Job:
    __slots__ = (
        "id",
        "kind",
        "spec",
        "deadline",
        "key",
        "definition",
        "attempt",
        "steps",
        "running",
        "stop_reason",
        "_aborts",
        "_lock",
    )

    def __init__(
        self,
        id: str,
        kind: str,
        spec: dict[str, Any],
        deadline: float,
        key: str,
        definition: CommandKind | None = None,
        attempt: int = 0,
        steps: int = 0,
        running: bool = False,
        stop_reason: str | None = None,
    ) -> None:
        self.id = id
        self.kind = kind
        self.spec = spec
        self.deadline = deadline  # epoch seconds
        self.key = key  # jobs with the same key run one after another, in arrival order
        self.definition = definition  # its registered CommandKind: handler, cancellable
        self.attempt = attempt
        self.steps = steps  # progress records sent in this attempt
        self.running = running
        self.stop_reason = stop_reason  # "cancelled" or "timeout" once the job must stop
        self._aborts: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def should_stop(self) -> bool:
        return self.stop_reason is not None

    def on_abort(self, hook: Callable[[], None]) -> None:
        """Register a call that unblocks the job (e.g. closes a streaming response)."""
        with self._lock:
            self._aborts.append(hook)
        if self.stop_reason:
            hook()

    def stop(self, reason: str) -> None:
        with self._lock:
            if self.stop_reason is None:
                self.stop_reason = reason
            hooks, self._aborts = self._aborts, []
        for hook in hooks:
            try:
                hook()
            except Exception:  # noqa: BLE001 - best effort: the response may already be closed
                pass

    def remaining_s(self) -> float:
        return self.deadline - time.time()


class Scheduler:
    def __init__(self, execute: Callable[[Job], None], max_pulls: int):
        self._execute = execute
        self._pool = ThreadPoolExecutor(max_workers=MAX_THREADS, thread_name_prefix="cmd")
        self._queues: dict[str, deque[Job]] = {}
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self.pull_slots = threading.BoundedSemaphore(max_pulls)

    def submit(self, job: Job) -> None:
        with self._lock:
            self._jobs[job.id] = job
            queue = self._queues.setdefault(job.key, deque())
            queue.append(job)
            first = len(queue) == 1
        if first:
            self._start(job)

    def find(self, command_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(command_id)

    def jobs(self) -> list[Job]:
        with self._lock:
            return list(self._jobs.values())

    def counts(self) -> QueueCounts:
        with self._lock:
            running = sum(1 for j in self._jobs.values() if j.running)
            return {"running": running, "queued": len(self._jobs) - running}

    def _start(self, job: Job) -> None:
        job.running = True
        self._pool.submit(self._run, job)

    def _run(self, job: Job) -> None:
        try:
            self._execute(job)
        except Exception:  # execute reports its own failures; this is a last guard
            log.exception("command %s (%s) crashed", job.id, job.kind)
        finally:
            self._finished(job)

    def _finished(self, job: Job) -> None:
        with self._lock:
            self._jobs.pop(job.id, None)
            queue = self._queues[job.key]
            queue.popleft()
            following = queue[0] if queue else None
            if not queue:
                del self._queues[job.key]
        if following is not None:
            self._start(following)

    def shutdown(self) -> None:
        for job in self.jobs():
            job.stop("shutdown")
        self._pool.shutdown(wait=False, cancel_futures=True)
