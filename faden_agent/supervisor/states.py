"""Each worker's explicit state, after supervisord's state machine: one guarded door
(WorkerProcess.change_state) that refuses a transition the table below does not allow."""

from __future__ import annotations

import collections
import enum
import time
from dataclasses import dataclass, field
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


@dataclass
class WorkerProcess:
    name: str
    target: str
    state: WorkerState = WorkerState.STOPPED
    pid: int | None = None
    started_at: float | None = None  # wall clock, for uptime
    started_mono: float | None = None
    last_alive_mono: float | None = None  # when its last "alive" message came
    restarts: int = 0
    last_exit: str | None = None  # "exit 1", "signal SIGKILL", "killed: hung": for people
    exit_cause: str = "none"  # the same as a bounded word: hung, thread_died, signal_<NAME>, exit_<code>
    next_start_mono: float = 0.0
    exit_times: collections.deque = field(default_factory=lambda: collections.deque(maxlen=256))
    status: dict[str, Any] = field(default_factory=dict)  # the worker's own fields, from its "alive" messages
    kill_at_mono: float | None = None  # set when found hung: SIGKILL after the dump grace
    fatal_streak: int = 0  # times it went FATAL since it last ran: 2 = its FATAL retry failed too
    failure: str | None = None  # "thread downlink died: OSError: ...", told by the worker before it exits

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
