"""The frame around every command kind. Runs in scheduler threads (inline kinds: in the loop)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from faden_agent import protocol
from faden_agent.common.failure import Cancelled
from faden_agent.config import Config
from faden_agent.workers.executor.docker_ops import CommandFailed, DockerOps
from faden_agent.workers.executor.host_policy import HostPolicy
from faden_agent.workers.executor.journal import Journal
from faden_agent.workers.executor.scheduler import Job, Scheduler
from faden_agent.workers.executor.timeline import Timeline

log = logging.getLogger(__name__)


class Commands:
    """The frame, and the scheduler that runs it: what a kind's handler is given."""

    def __init__(self, config: Config, ops: DockerOps, journal: Journal, timeline: Timeline, policy: HostPolicy):
        self.config = config
        self.policy = policy  # judged again right before Docker acts (container.py)
        self.ops = ops
        self.journal = journal
        self.timeline = timeline
        self.scheduler = Scheduler(self.execute, config.max_concurrent_pulls)
        # For /metrics: image bytes that arrived from peers, whichever kind fetched them
        self.peer_bytes_fetched = 0
        self._counting = threading.Lock()  # scheduler threads fetch side by side

    def count_fetched(self, size: int) -> None:
        with self._counting:
            self.peer_bytes_fetched += size

    # --- the frame around every kind

    def execute(self, job: Job) -> None:
        """Run one job to exactly one terminal state; never raises (a bug ends the command)."""
        try:
            self._execute(job)
        except Exception as exc:  # e.g. the journal itself failing
            log.exception("command %s (%s) failed outside its handler", job.id, job.kind)
            self.fail_unexpectedly(job.id, job.kind, exc)

    def fail_unexpectedly(self, command_id: str, kind: str, exc: BaseException) -> None:
        """End a command that raised something no step expects: failed, internal_error."""
        try:
            self.timeline.finish(
                command_id,
                protocol.FAILED,
                "internal_error",
                f"{kind}: unexpected error: {type(exc).__name__}: {protocol.quote(str(exc))}",
            )
        except Exception:  # the journal is gone too: the next start resumes or poisons it
            log.exception("could not record the failure of command %s", command_id)

    def _execute(self, job: Job) -> None:
        if job.should_stop():  # cancelled or timed out while queued: already reported
            self._finish_stopped(job, None)
            return
        assert job.definition is not None
        job.attempt = self.journal.mark_running(job.id)
        self.timeline.started(job.id, job.attempt)
        try:
            result = job.definition.handler(self, job)
        except Cancelled:
            self._finish_stopped(job, None)
        except CommandFailed as failure:
            if job.should_stop():
                self._finish_stopped(job, failure)
            else:
                self.timeline.finish(job.id, protocol.FAILED, failure.reason, failure.message, **failure.result)
        except Exception as exc:  # a bug must end the command, not the worker
            log.exception("command %s (%s) failed unexpectedly", job.id, job.kind)
            self.fail_unexpectedly(job.id, job.kind, exc)
        else:
            message = result.pop("message", f"{job.kind} done")
            self.timeline.finish(job.id, protocol.SUCCEEDED, "ok", message, result=result)

    def _finish_stopped(self, job: Job, failure: CommandFailed | None) -> None:
        if job.stop_reason == "cancelled":
            self.timeline.finish(job.id, protocol.CANCELLED, "cancelled", f"{job.kind} was cancelled")
        elif job.stop_reason == "interrupted":
            undo = job.definition.undo if job.definition else None
            removed = undo(self, job) if undo else False
            self.timeline.finish(
                job.id,
                protocol.FAILED,
                "interrupted",
                f"{job.kind} was interrupted when the executor stopped (attempt {job.attempt}) "
                "and its deadline has passed" + ("; removed the container it had made" if removed else ""),
            )
        else:
            detail = f" (last error: {failure.message})" if failure else ""
            self.timeline.finish(
                job.id, protocol.FAILED, "timeout", f"{job.kind} did not finish before its deadline{detail}"
            )

    def check(self, job: Job) -> None:
        if job.should_stop():
            raise Cancelled()

    def progress(self, job: Job, **fields: Any) -> None:
        job.steps += 1
        self.timeline.progress(job.id, job.attempt, job.steps, **fields)
