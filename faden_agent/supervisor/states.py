"""Each worker's explicit state, after supervisord's state machine: one guarded door
(WorkerProcess.change_state) that refuses a transition the table below does not allow."""

from __future__ import annotations

import collections
import enum
import time
from typing import Any


class WorkerState(enum.StrEnum):
    STOPPED = "STOPPED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    HUNG = "HUNG"  # silent past the hang timeout: its traceback dumped, SIGKILL due
    BACKOFF = "BACKOFF"
    STOPPING = "STOPPING"
    EXITED = "EXITED"
    FATAL = "FATAL"


S = WorkerState
EXITS = {S.EXITED, S.BACKOFF, S.FATAL}  # where a reaped worker goes
ALLOWED: dict[WorkerState, set[WorkerState]] = {
    S.STOPPED: {S.STARTING, S.STOPPED},
    S.STARTING: {S.RUNNING, S.HUNG, S.STOPPING, *EXITS},
    S.RUNNING: {S.HUNG, S.STOPPING, *EXITS},
    S.HUNG: {S.STOPPING, *EXITS},
    S.STOPPING: {S.STOPPING, *EXITS},
    S.BACKOFF: {S.STARTING, S.STOPPED},
    S.EXITED: {S.STARTING},
    S.FATAL: {S.STARTING, S.STOPPED},
}


class StateError(RuntimeError):
    """A transition the state table does not allow: a bug in the supervisor, said loudly."""


class WorkerProcess:
    __slots__ = (
        "name",
        "target",
        "state",
        "pid",
        "started_at",
        "started_mono",
        "last_alive_mono",
        "restarts",
        "last_exit",
        "exit_cause",
        "next_start_mono",
        "exit_times",
        "status",
        "kill_at_mono",
        "fatal_streak",
        "failure",
    )

    def __init__(
        self,
        name: str,
        target: str,
        state: WorkerState = WorkerState.STOPPED,
        pid: int | None = None,
        started_at: float | None = None,
        started_mono: float | None = None,
        last_alive_mono: float | None = None,
        restarts: int = 0,
        last_exit: str | None = None,
        exit_cause: str = "none",
        next_start_mono: float = 0.0,
        exit_times: collections.deque | None = None,
        status: dict[str, Any] | None = None,
        kill_at_mono: float | None = None,
        fatal_streak: int = 0,
        failure: str | None = None,
    ) -> None:
        self.name = name
        self.target = target
        self.state = state
        self.pid = pid
        self.started_at = started_at  # wall clock, for uptime
        self.started_mono = started_mono
        self.last_alive_mono = last_alive_mono  # when its last "alive" message came
        self.restarts = restarts
        self.last_exit = last_exit  # "exit 1", "signal SIGKILL", "killed: hung": for people
        self.exit_cause = exit_cause  # the same as a bounded word: hung, thread_died, signal_<NAME>, exit_<code>
        self.next_start_mono = next_start_mono
        self.exit_times: collections.deque = collections.deque(maxlen=256) if exit_times is None else exit_times
        # the worker's own fields, from its "alive" messages
        self.status: dict[str, Any] = {} if status is None else status
        self.kill_at_mono = kill_at_mono  # set when found hung: SIGKILL after the dump grace
        self.fatal_streak = fatal_streak  # times it went FATAL since it last ran: 2 = its FATAL retry failed too
        self.failure = failure  # "thread downlink died: OSError: ...", told by the worker before it exits

    def change_state(self, new: WorkerState) -> None:
        """The one door for state changes (supervisord's change_state + _assertInState)."""
        if new not in ALLOWED[self.state]:
            raise StateError(f"worker {self.name}: {self.state} -> {new} is not a transition")
        self.state = new

    def uptime(self, now_wall: float | None = None) -> float | None:
        if self.pid is None or self.started_at is None:
            return None
        return max(0.0, (now_wall or time.time()) - self.started_at)

    def liveness_age(self, now_mono: float | None = None) -> float | None:
        """Seconds since its last "alive" message (ps: ALIVE, alive_age_s)."""
        if self.pid is None or self.last_alive_mono is None:
            return None
        return max(0.0, (now_mono or time.monotonic()) - self.last_alive_mono)
