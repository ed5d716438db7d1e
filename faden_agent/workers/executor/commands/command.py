"""The command.* kinds: command.cancel (no Docker call: runs inline in the worker loop)."""

from __future__ import annotations

from typing import Any

from faden_agent import protocol
from faden_agent.workers.executor import specs
from faden_agent.workers.executor.commands.frame import Commands
from faden_agent.workers.executor.docker_ops import CommandFailed
from faden_agent.workers.executor.kinds import CommandKind, register
from faden_agent.workers.executor.scheduler import Job


def command_cancel(commands: Commands, job: Job) -> dict[str, Any]:
    target_id = job.spec["command_id"]
    target = commands.scheduler.find(target_id)
    if target is None:
        entry = commands.journal.get(target_id)
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
        commands.timeline.finish(
            target_id, protocol.CANCELLED, "cancelled", f"{target.kind} was cancelled before it started"
        )
    return {"target": target_id, "message": f"cancel requested for {target_id} ({target.kind})"}


register(CommandKind("command.cancel", command_cancel, {"command_id": specs.string}))
