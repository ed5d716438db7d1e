"""What each command kind does against the engine. Runs in scheduler threads only.

`execute(job)` wraps every kind the same way: journal the attempt, report started, run the
handler, report exactly one terminal state. Handlers return a result dict or raise
CommandFailed(reason) / Cancelled.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from faden_agent import protocol
from faden_agent.config import Config
from faden_agent.workers.executor import peer_commands
from faden_agent.workers.executor.docker_ops import Cancelled, CommandFailed, DockerOps
from faden_agent.workers.executor.journal import Journal
from faden_agent.workers.executor.log_handoff import hand_over_logs
from faden_agent.workers.executor.ray_logs import image_user, make_ray_log_dir
from faden_agent.workers.executor.scheduler import Job, Scheduler
from faden_agent.workers.executor.timeline import Timeline

log = logging.getLogger(__name__)

POLL_START_S = 0.05
POLL_MAX_S = 0.5
# A container must still run this long after it was first seen running: a crash at start
# (bad arguments, missing file) then fails the command instead of passing as "running".
RUN_SETTLE_S = 0.2


class Commands:
    def __init__(self, config: Config, ops: DockerOps, journal: Journal, timeline: Timeline):
        self.config = config
        self.ops = ops
        self.journal = journal
        self.timeline = timeline
        self.scheduler: Scheduler | None = None  # set by the worker (the scheduler calls execute)

    # --- the frame around every kind

    def execute(self, job: Job) -> None:
        """Run one job to exactly one terminal state; never raises (a bug ends the command)."""
        try:
            self._execute(job)
        except Exception as exc:  # noqa: BLE001 - e.g. the journal itself failing
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
        except Exception:  # noqa: BLE001 - the journal is gone too: the next start resumes or poisons it
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
        except Exception as exc:  # noqa: BLE001 - a bug must end the command, not the worker
            log.exception("command %s (%s) failed unexpectedly", job.id, job.kind)
            self.fail_unexpectedly(job.id, job.kind, exc)
        else:
            message = result.pop("message", f"{job.kind} done")
            self.timeline.finish(job.id, protocol.SUCCEEDED, "ok", message, result=result)

    def _finish_stopped(self, job: Job, failure: CommandFailed | None) -> None:
        if job.stop_reason == "cancelled":
            self.timeline.finish(job.id, protocol.CANCELLED, "cancelled", f"{job.kind} was cancelled")
        elif job.stop_reason == "interrupted":
            removed = self._discard_own(job)
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

    # --- images

    def image_pull(self, job: Job) -> dict[str, Any]:
        result = self._pull_or_fetch(job)
        return {
            **result,
            "message": f"pulled {job.spec['image']}" + (f" from peer {result['source']}" if "source" in result else ""),
        }

    def _pull_or_fetch(self, job: Job) -> dict[str, Any]:
        """The registry first; the spec's peers when it fails or lacks the image (issue 14)."""
        try:
            return self._pull(job, job.spec["image"], job.spec.get("auth"))
        except CommandFailed as failure:
            if not job.spec.get("peers") or failure.reason not in peer_commands.FALLBACK_REASONS:
                raise
            log.info("command %s: %s; fetching from peers", job.id, failure.message)
            result = peer_commands.fetch_from_peers(
                self, job, job.spec.get("image_id"), job.spec["image"], job.spec["peers"]
            )
            return {**result, "registry_failure": failure.reason}

    def _pull(self, job: Job, image: str, auth: dict[str, str] | None) -> dict[str, Any]:
        assert self.scheduler is not None
        slots = self.scheduler.pull_slots
        while not slots.acquire(timeout=0.2):
            self.check(job)
        try:
            self.progress(job, phase="pull", image=image, bytes_done=0, bytes_total=0, layers=0)
            return self.ops.pull(
                image,
                auth,
                lambda figures: self.progress(job, phase="pull", image=image, **figures),
                job.on_abort,
                job.should_stop,
            )
        finally:
            slots.release()

    def image_remove(self, job: Job) -> dict[str, Any]:
        result = self.ops.remove_image(job.spec["image"], job.spec["force"])
        gone = "was already absent" if result["already_absent"] else "removed"
        return {**result, "message": f"image {job.spec['image']} {gone}"}

    # --- containers

    def authorize(self, container: Any, job: Job, action: str) -> None:
        """Only containers the agent created (label) or adopted may be touched."""
        labels = container.labels or {}
        if labels.get(protocol.LABEL_MANAGED) == "true" or container.id in self.journal.adopted_ids():
            return
        if job.spec.get("adopt"):
            self.journal.adopt(container.id, container.name, job.id)
            log.info("adopted unmanaged container %s on command %s", container.name, job.id)
            return
        raise CommandFailed(
            "not_managed",
            f"refusing to {action} container {container.name}: it was not created "
            "by the agent (send adopt: true to take it over explicitly)",
        )

    def _target(self, job: Job, action: str) -> Any:
        container = self.ops.find(job.spec["name"])
        if container is None:
            raise CommandFailed("not_found", f"no container named {job.spec['name']}")
        self.authorize(container, job, action)
        return container

    def container_run(self, job: Job) -> dict[str, Any]:
        spec = job.spec
        existing = self.ops.find(spec["name"])
        if existing is not None:
            if (existing.labels or {}).get(protocol.LABEL_COMMAND_ID) == job.id:
                # created by this very command before a restart or a re-delivery: finish it
                if existing.status in ("created", "exited"):
                    self.ops.start(existing)
                return self._wait_running(job, existing, created_now=False)
            self.authorize(existing, job, "replace")
            if not spec["replace"]:
                owner = (existing.labels or {}).get(protocol.LABEL_COMMAND_ID, "an earlier command")
                raise CommandFailed(
                    "conflict",
                    f"a container named {spec['name']} already exists (from {owner}); "
                    "send replace: true to recreate it",
                )
        self._ensure_image(job)
        self.check(job)
        if existing is not None:
            hand_over_logs(self.config, existing)
            self.ops.remove(existing, force=True)
            self.journal.forget(existing.id)
        container = self.ops.create(spec, self._labels(job), self._ray_mounts(spec))
        try:
            self.check(job)
            self.ops.start(container)
            return self._wait_running(job, container, created_now=True)
        except CommandFailed as failure:
            if failure.reason not in ("container_exited", "unhealthy"):  # those stay for their logs
                self._discard(container)
            raise
        except Cancelled:
            self._discard(container)
            raise

    def _discard_own(self, job: Job) -> bool:
        """Remove the container an interrupted container.run had made, so failed means no effect."""
        if "name" not in job.spec:
            return False
        try:
            container = self.ops.find(job.spec["name"])
        except CommandFailed:
            return False
        if container is None or (container.labels or {}).get(protocol.LABEL_COMMAND_ID) != job.id:
            return False
        self._discard(container)
        return True

    def _discard(self, container: Any) -> None:
        try:
            self.ops.remove(container, force=True)
        except CommandFailed as exc:
            log.warning("could not remove half-made container %s: %s", container.name, exc.message)

    def _ensure_image(self, job: Job) -> None:
        image, policy = job.spec["image"], job.spec["pull"]
        if policy == "always" or (policy == "missing" and not self.ops.has_image(image)):
            self._pull_or_fetch(job)
        elif policy == "never" and not self.ops.has_image(image):
            raise CommandFailed("image_not_found", f"image {image} is not on this machine and pull is never")

    def _labels(self, job: Job) -> dict[str, str]:
        spec = job.spec
        labels = dict(spec["labels"])
        labels[protocol.LABEL_MANAGED] = "true"
        labels[protocol.LABEL_AGENT_ID] = self.config.agent_id
        labels[protocol.LABEL_COMMAND_ID] = job.id
        if spec["cluster"]:
            labels[protocol.LABEL_CLUSTER] = spec["cluster"]
        if spec["workload"]:
            labels[protocol.LABEL_WORKLOAD] = spec["workload"]
        if spec["ray"]:
            labels[protocol.LABEL_RAY] = "true"
        return labels

    def _ray_mounts(self, spec: dict[str, Any]) -> list[dict[str, Any]]:
        if not spec["ray"]:
            return []
        user = spec.get("user") if spec.get("user") is not None else image_user(self.ops, spec["image"])
        host_dir = make_ray_log_dir(Path(self.config.ray_log_dir), spec["name"], user)
        return [{"type": "bind", "source": str(host_dir), "target": protocol.RAY_LOG_MOUNT, "read_only": False}]

    def _wait_running(self, job: Job, container: Any, created_now: bool) -> dict[str, Any]:
        """Until the container runs (and is healthy when it has a healthcheck)."""
        wants_health = bool(job.spec.get("healthcheck")) and job.spec["healthcheck"]["test"][0] != "NONE"
        delay = POLL_START_S
        seen_running: tuple[float, str] | None = None  # (when, StartedAt) of the first sighting
        while True:
            attrs = self.ops.reload(container)
            state = attrs["State"]
            health = (state.get("Health") or {}).get("Status")
            if state.get("Running") and not state.get("Restarting"):
                if wants_health and health == "healthy":
                    return self._run_result(container, attrs, created_now, "healthy")
                if not wants_health:
                    if seen_running is None or seen_running[1] != state.get("StartedAt"):
                        seen_running = (time.monotonic(), state.get("StartedAt"))
                    left = RUN_SETTLE_S - (time.monotonic() - seen_running[0])
                    if left <= 0:
                        return self._run_result(container, attrs, created_now, "running")
                    # Look again once, when the settle check ends (not on the polling ladder,
                    # which overshot it by ~50 ms and cost four more inspects).
                    self.check(job)
                    time.sleep(left)
                    continue
                if health == "unhealthy":
                    raise CommandFailed(
                        "unhealthy",
                        f"container {container.name} runs but its healthcheck fails",
                        container_id=container.id,
                    )
            elif state.get("Status") in ("exited", "dead") or state.get("Restarting"):
                tail = self.ops.logs_tail(container)
                raise CommandFailed(
                    "container_exited",
                    f"container {container.name} exited with code "
                    f"{state.get('ExitCode')}" + (f"; last output: {tail[-300:]}" if tail else ""),
                    container_id=container.id,
                    exit_code=state.get("ExitCode"),
                )
            self.check(job)
            time.sleep(delay)
            delay = min(delay * 2, POLL_MAX_S)

    @staticmethod
    def _run_result(container: Any, attrs: dict[str, Any], created_now: bool, status: str) -> dict[str, Any]:
        verb = "started" if created_now else "was already created by this command and"
        return {
            "container_id": container.id,
            "name": container.name,
            "image": attrs["Config"]["Image"],
            "image_id": attrs["Image"],
            "status": status,
            "created": created_now,
            "message": f"container {container.name} {verb} is {status}",
        }

    def container_stop(self, job: Job) -> dict[str, Any]:
        container = self._target(job, "stop")
        self.ops.stop(container, job.spec["timeout_s"])
        attrs = self.ops.reload(container)
        return {
            "container_id": container.id,
            "name": container.name,
            "exit_code": attrs["State"].get("ExitCode"),
            "message": f"container {container.name} stopped",
        }

    def container_start(self, job: Job) -> dict[str, Any]:
        container = self._target(job, "start")
        self.ops.start(container)
        result = self._wait_running(job, container, created_now=False)
        return {**result, "created": False, "message": f"container {container.name} started"}

    def container_restart(self, job: Job) -> dict[str, Any]:
        container = self._target(job, "restart")
        self.ops.restart(container, job.spec["timeout_s"])
        result = self._wait_running(job, container, created_now=False)
        return {**result, "created": False, "message": f"container {container.name} restarted"}

    def container_remove(self, job: Job) -> dict[str, Any]:
        container = self.ops.find(job.spec["name"])
        if container is None:
            return {
                "name": job.spec["name"],
                "already_absent": True,
                "message": f"no container named {job.spec['name']}: nothing to remove",
            }
        self.authorize(container, job, "remove")
        hand_over_logs(self.config, container)
        self.ops.remove(container, force=job.spec["force"], volumes=job.spec["volumes"])
        self.journal.forget(container.id)
        return {
            "container_id": container.id,
            "name": container.name,
            "already_absent": False,
            "message": f"container {container.name} removed",
        }

    # --- cancellation (no Docker call: runs inline in the worker loop)

    def command_cancel(self, job: Job) -> dict[str, Any]:
        assert self.scheduler is not None
        target_id = job.spec["command_id"]
        target = self.scheduler.find(target_id)
        if target is None:
            entry = self.journal.get(target_id)
            ended = entry.outcome["state"] if entry and entry.outcome else None
            raise CommandFailed(
                "not_found",
                f"command {target_id} is not running" + (f" (it already ended: {ended})" if ended else " (unknown id)"),
            )
        if target.definition is None or not target.definition.cancellable:
            raise CommandFailed("conflict", f"command {target_id} ({target.kind}) cannot be cancelled")
        was_running = target.running and target.attempt > 0
        target.stop("cancelled")
        if not was_running:  # still queued: it ends now; its turn will find it stopped
            self.timeline.finish(
                target_id, protocol.CANCELLED, "cancelled", f"{target.kind} was cancelled before it started"
            )
        return {"target": target_id, "message": f"cancel requested for {target_id} ({target.kind})"}
