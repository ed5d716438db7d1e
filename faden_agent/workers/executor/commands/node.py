"""The node.* kinds: node.drain (cordon, then stop the managed containers within the deadline)
and node.undrain (schedulable again) (docs/commands.md). Each container gets its own grace (its
stop signal and StopTimeout) until the graceful part of the deadline ends; what still runs then is
killed and named `hard_stopped`; its last lines are shipped before it is removed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from faden_agent import protocol
from faden_agent.node import drainstate
from faden_agent.workers.executor import specs
from faden_agent.workers.executor.adoption import managed_containers
from faden_agent.workers.executor.commands.container import STOP_TIMEOUT_S, drain_and_remove
from faden_agent.workers.executor.commands.frame import Commands
from faden_agent.workers.executor.docker_ops import CommandFailed
from faden_agent.workers.executor.kinds import COMMON, CommandKind, register
from faden_agent.workers.executor.log_handoff import hand_over_logs
from faden_agent.workers.executor.scheduler import Job

log = logging.getLogger(__name__)

DRAIN_DEADLINE_S = 300.0  # when neither the envelope nor the spec gives one
HARD_STOP_RESERVE_S = 5.0  # the end of the deadline kept for kills, the last lines and removals
HARD_STOP_SHARE = 1 / 3  # ... at most this share of a short deadline
LOGS_WAIT_MAX_S = 10.0  # the last lines of one container: at most this long (and never past the deadline)
JOIN_SLACK_S = 0.5
REMOVE_RESERVE_S = 2 * JOIN_SLACK_S  # the removal after the last lines, and the join's slack


def node_drain(commands: Commands, job: Job) -> dict[str, Any]:
    return answering(commands, job, _drain)


def node_undrain(commands: Commands, job: Job) -> dict[str, Any]:
    return answering(commands, job, _undrain)


def answering(commands: Commands, job: Job, handler: Callable[[Commands, Job], dict[str, Any]]) -> dict[str, Any]:
    """Run the handler; a host request's outcome is also kept for the CLI that waits for it
    (any kind a host request asks for answers through this)."""
    request_id = job.spec.get("request_id")
    try:
        result = handler(commands, job)
    except CommandFailed as failure:
        if request_id:
            failed = {"command_id": job.id, "state": protocol.FAILED, "reason": failure.reason}
            drainstate.record_answer(commands.config.state_dir, request_id, {**failed, "message": failure.message})
        raise
    if request_id:
        answer: dict[str, Any] = {"command_id": job.id, "state": protocol.SUCCEEDED, "reason": "ok", "result": result}
        drainstate.record_answer(commands.config.state_dir, request_id, {**answer, "message": result.get("message")})
    return result


def _undrain(commands: Commands, job: Job) -> dict[str, Any]:
    before = drainstate.read(commands.config.state_dir).get("state")
    drainstate.update(
        commands.config.state_dir,
        state=protocol.SCHEDULABLE,
        command_id=job.id,
        request_id=job.spec.get("request_id"),
        containers={},
    )
    return {"state": protocol.SCHEDULABLE, "was": before, "message": f"schedulable again (was {before})"}


def _drain(commands: Commands, job: Job) -> dict[str, Any]:
    spec, state_dir = job.spec, commands.config.state_dir
    request_id = spec.get("request_id")
    # Cordoned first: a drain that fails (the engine down) leaves a machine nothing is placed on.
    drainstate.update(state_dir, state=protocol.CORDONED, command_id=job.id, request_id=request_id, containers={})
    if not spec["stop"]:
        return {"state": protocol.CORDONED, "message": "cordoned: nothing new is placed here; containers keep running"}
    targets, absent = _targets(commands, spec["containers"])
    phases = {c.name: "stopping" for c in targets}
    drainstate.update(state_dir, state=protocol.DRAINING, command_id=job.id, request_id=request_id, containers=phases)
    total = max(0.0, job.remaining_s())
    graceful_until = job.deadline - min(HARD_STOP_RESERVE_S, HARD_STOP_SHARE * total)
    progress = Progress(commands, job, phases)
    outcomes = stop_each(commands, job, targets, graceful_until, job.deadline, progress, remove=spec["remove"])
    hard = sorted(n for n, o in outcomes.items() if o["how"] == "hard_stopped")
    failed = {n: o["message"] for n, o in outcomes.items() if o["how"] in ("failed", "unfinished")}
    current = drainstate.read(state_dir)
    if current.get("command_id") == job.id:  # an undrain meanwhile wins
        drainstate.update(state_dir, state=protocol.DRAINED, containers=progress.phases())
    result = {
        "state": protocol.DRAINED,
        "containers": outcomes,
        "hard_stopped": hard,
        "absent": absent,
        "message": _summary(outcomes, hard, absent),
    }
    if failed:
        raise CommandFailed(
            "docker_error",
            f"drain: could not stop or remove {', '.join(sorted(failed))}: {'; '.join(failed.values())}"[:1500],
            **result,
        )
    return result


def _targets(commands: Commands, names: list[str] | None) -> tuple[list[Any], list[str]]:
    """This agent's managed containers (its agent-id label) and the adopted ones that the spec
    names, all of them by default; the names asked for that are not there."""
    found = ours(commands)
    if names is None:
        return [found[n] for n in sorted(found)], []
    return [found[n] for n in names if n in found], [n for n in names if n not in found]


def stop_each(
    commands: Commands,
    job: Job,
    targets: list[Any],
    graceful_until: float,
    until: float,
    progress: Progress,
    remove: bool,
) -> dict[str, dict[str, Any]]:
    """Stops the containers side by side, each with its own grace until `graceful_until`, then
    hard; their last lines shipped; removed with `remove`. Each one's outcome by name; one still
    in an engine call at `until` is `unfinished`."""
    outcomes: dict[str, dict[str, Any]] = {}
    threads = [
        threading.Thread(
            target=_stop_one,
            args=(commands, job, c, graceful_until, until, progress, outcomes, remove),
            name=f"stop-{c.name}"[:15],
            daemon=True,
        )
        for c in targets
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, until - time.time() - JOIN_SLACK_S))
    for container in targets:  # a thread still stuck in an engine call at the deadline
        outcomes.setdefault(container.name, {"how": "unfinished", "message": "the engine did not answer in time"})
    return outcomes


def ours(commands: Commands) -> dict[str, Any]:
    """name -> container of this agent's managed containers (its agent-id label) and adopted ones."""
    adopted = commands.journal.adopted_ids()
    agent_id = commands.config.agent_id
    return {
        c.name: c
        for c in managed_containers(commands.ops, commands.journal)
        if c.id in adopted or (c.labels or {}).get(protocol.LABEL_AGENT_ID) == agent_id
    }


class Progress:
    """Per-container phases: one timeline record (and, for a drain, one drain-state write) per change."""

    def __init__(self, commands: Commands, job: Job, phases: dict[str, str], drain: bool = True):
        self.commands, self.job, self.drain = commands, job, drain
        self._phases = dict(phases)
        self._lock = threading.Lock()

    def phases(self) -> dict[str, str]:
        with self._lock:
            return dict(self._phases)

    def note(self, name: str, phase: str, **fields: Any) -> None:
        with self._lock:
            self._phases[name] = phase
            try:
                if self.drain:
                    drainstate.update(self.commands.config.state_dir, containers=dict(self._phases))
                self.commands.progress(self.job, phase=phase, container=name, **fields)
            except Exception:  # noqa: BLE001 - progress is a courtesy; the stops go on
                log.exception("could not report %s of %s", phase, name)


def _stop_one(
    commands: Commands,
    job: Job,
    container: Any,
    graceful_until: float,
    until: float,
    progress: Progress,
    outcomes: dict[str, dict[str, Any]],
    remove: bool,
) -> None:
    name = container.name
    try:
        outcome = _stop(commands, container, graceful_until)
        progress.note(name, "stopped" if outcome["how"] != "hard_stopped" else "hard_stopped", **outcome)
        # What is left of the deadline, less the removal: a container killed at the end of the
        # graceful part still has its last lines shipped (a fixed share left none of a short one).
        logs_wait = max(0.0, min(LOGS_WAIT_MAX_S, until - time.time() - REMOVE_RESERVE_S))
        if remove:
            drain_and_remove(commands, container, force=True, timeout_s=0, logs_wait_s=logs_wait)
            outcome["removed"] = True
            progress.note(name, "removed")
        else:
            outcome["lines_shipped"] = hand_over_logs(commands.config, container, logs_wait)
            progress.note(name, "lines_shipped" if outcome["lines_shipped"] else "lines_not_confirmed")
        outcomes[name] = outcome
    except CommandFailed as failure:
        outcomes[name] = {"how": "failed", "reason": failure.reason, "message": failure.message}
        progress.note(name, "failed", reason=failure.reason, message=failure.message)
    except Exception as exc:  # noqa: BLE001 - one container's surprise must not end the others' stops
        log.exception("stopping %s failed", name)
        outcomes[name] = {"how": "failed", "reason": "internal_error", "message": f"{type(exc).__name__}: {exc}"}


def _stop(commands: Commands, container: Any, graceful_until: float) -> dict[str, Any]:
    """Stop with the container's own signal; killed after its own grace, or at the end of the
    graceful part of the deadline, whichever comes first (`hard_stopped` then)."""
    attrs = commands.ops.reload(container)
    state, config = attrs.get("State") or {}, attrs.get("Config") or {}
    if not (state.get("Running") or state.get("Restarting")):
        return {"how": "already_stopped", "exit_code": state.get("ExitCode")}
    grace = config.get("StopTimeout")
    grace = STOP_TIMEOUT_S if type(grace) is not int or grace < 0 else grace
    window = int(max(0.0, graceful_until - time.time()))
    timeout = min(grace, window)
    started = time.monotonic()
    commands.ops.stop(container, timeout)  # the engine sends the container's StopSignal, then SIGKILL
    elapsed = time.monotonic() - started
    exit_code = (commands.ops.reload(container).get("State") or {}).get("ExitCode")
    killed = exit_code == 137 and elapsed >= timeout - 0.5
    how = "exited" if not killed else ("hard_stopped" if timeout < grace else "killed_after_grace")
    return {
        "how": how,
        "exit_code": exit_code,
        "elapsed_s": round(elapsed, 3),
        "grace_s": grace,
        "signal": config.get("StopSignal") or "SIGTERM",
    }


def _summary(outcomes: dict[str, dict[str, Any]], hard: list[str], absent: list[str]) -> str:
    stopped = [n for n, o in outcomes.items() if o["how"] not in ("failed", "unfinished")]
    text = f"drained: {len(stopped)} container(s) stopped"
    if hard:
        text += f"; stopped hard at the deadline: {', '.join(hard)}"
    if absent:
        text += f"; not on this machine: {', '.join(absent)}"
    return text


NODE = {"request_id": (specs.string, None), **COMMON}


def by_node(spec: dict[str, Any]) -> str:
    return "node"


register(
    CommandKind(
        "node.drain",
        node_drain,
        {},
        {
            "containers": (specs.str_list, None),
            "stop": (specs.boolean, True),
            "remove": (specs.boolean, True),
            **NODE,
        },
        deadline_s=DRAIN_DEADLINE_S,
        queue_key=by_node,
    )
)
register(CommandKind("node.undrain", node_undrain, {}, NODE))  # inline: it touches no Docker
