"""The supervisor: forks the workers, restarts them, answers `ps`, talks to systemd."""

from faden_agent.supervisor.arbiter import Supervisor
from faden_agent.supervisor.states import WorkerProcess, WorkerState

__all__ = ["Supervisor", "WorkerProcess", "WorkerState"]
