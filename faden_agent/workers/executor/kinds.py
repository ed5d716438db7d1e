"""The command kind record and the registry: everything the executor knows about a kind."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from faden_agent.workers.executor import specs
from faden_agent.workers.executor.specs import Check

if TYPE_CHECKING:
    from faden_agent.workers.executor.commands.frame import Commands
    from faden_agent.workers.executor.scheduler import Job

# The spec's deadline_s or the envelope's deadline win; this is the bound when neither is given.
DEFAULT_DEADLINE_S = 120.0
# Optional keys every kind that may take long accepts.
COMMON = {"deadline_s": (specs.seconds, None)}
# No optional key (read only: one mapping shared by every kind that names none).
NO_OPTIONAL: Mapping[str, tuple[Check, Any]] = MappingProxyType({})


class CommandKind(NamedTuple):
    name: str
    handler: Callable[[Commands, Job], dict[str, Any]]  # (commands, job) -> result, or raises
    required: Mapping[str, Check]
    optional: Mapping[str, tuple[Check, Any]] = NO_OPTIONAL
    deadline_s: float = DEFAULT_DEADLINE_S
    queue_key: Callable[[dict[str, Any]], str] | None = None  # None: inline, in the worker loop
    cancellable: bool = False
    # Removes what an interrupted attempt made, so "failed: interrupted" means no effect;
    # True when it removed something.
    undo: Callable[[Commands, Job], bool] | None = None
    host_policy: bool = False  # it makes a container: the host policy judges its spec first

    @property
    def inline(self) -> bool:
        """Touches no Docker: runs in the worker loop, ahead of every queue."""
        return self.queue_key is None

    def validate(self, spec: Any) -> dict[str, Any]:
        """The normalised spec (defaults filled in, sizes in bytes), or specs.SpecError."""
        return specs.check_spec(self.name, self.required, self.optional, spec)

    def deadline(self, spec: dict[str, Any], envelope_deadline: float | None, received_at: float) -> float:
        """The earliest of the envelope's deadline and the spec's deadline_s; the default otherwise."""
        candidates = [envelope_deadline] if envelope_deadline is not None else []
        if spec.get("deadline_s"):
            candidates.append(received_at + spec["deadline_s"])
        return min(candidates) if candidates else received_at + self.deadline_s


KINDS: dict[str, CommandKind] = {}


def register(kind: CommandKind) -> None:
    assert kind.name not in KINDS, f"command kind {kind.name} registered twice"
    KINDS[kind.name] = kind
