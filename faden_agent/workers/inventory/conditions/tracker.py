"""The node conditions' states: each condition's signal of this round against its held state;
a change of `active` is a `node.condition_changed` event, queued until the outbox takes it (a
read-only state directory keeps it waiting in memory, at most MAX_PENDING). States and the
rules' memories are kept in the store, so a restart neither repeats an event nor forgets one."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

from faden_agent.protocol.conditions import CONDITION_CHANGED, ConditionChanged, ConditionState
from faden_agent.workers.inventory.conditions.store import ConditionStore

MAX_PENDING = 64
MAX_REASON = 300


class Signal(NamedTuple):
    """What a rule found this round: active (True), not (False) or cannot tell (None), and why."""

    active: bool | None
    reason: str | None = None


class NodeConditions:
    def __init__(self, store: ConditionStore):
        self.store = store
        self.pending: deque[ConditionChanged] = deque(maxlen=MAX_PENDING)
        self.dropped = 0  # events pushed out of a full queue

    def memory(self, name: str) -> dict[str, Any]:
        """The rule's own memory, kept across restarts (a JSON object it fills)."""
        return self.store.memory.setdefault(name, {})

    def update(self, signals: dict[str, Signal], now: float) -> list[ConditionChanged]:
        """Takes this round's signals; the events they make (also queued in `pending`).
        A condition no rule reported this round (no GPU any more, say) is no longer held."""
        events = []
        for name, signal in signals.items():
            reason = signal.reason[:MAX_REASON] if signal.reason and signal.active is not False else None
            held = self.store.states.get(name)
            if held is not None and held["active"] == signal.active:
                held["reason"] = reason
                continue
            if held is not None or signal.active:  # a condition first seen inactive is no event
                events.append(self._event(name, signal.active, held["active"] if held else None, reason, now))
            self.store.states[name] = {"active": signal.active, "reason": reason, "since": now}
        for name in [n for n in self.store.states if n not in signals]:
            del self.store.states[name]
        self.store.save()
        for event in events:
            if len(self.pending) == self.pending.maxlen:
                self.dropped += 1
            self.pending.append(event)
        return events

    def _event(
        self, name: str, active: bool | None, old: bool | None, reason: str | None, now: float
    ) -> ConditionChanged:
        return {
            "type": CONDITION_CHANGED,
            "condition": name,
            "active": active,
            "old": old,
            "reason": reason,
            "since": now,
        }

    def deliver(self, put: Callable[[ConditionChanged], Any]) -> int:
        """Hands the queued events to `put` in order; stops at the first that fails (it stays
        first in the queue, the error is raised). Returns how many went."""
        sent = 0
        while self.pending:
            put(self.pending[0])
            self.pending.popleft()
            sent += 1
        return sent

    def section(self) -> dict[str, ConditionState]:
        """The inventory's `conditions` section: every condition a rule reported, by name."""
        return {
            name: {"active": state["active"], "reason": state["reason"], "since": state["since"]}
            for name, state in sorted(self.store.states.items())
        }

    def active(self) -> dict[str, str | None]:
        """The active conditions and their reasons (the worker's status: ps, heartbeats; read
        from the worker's main thread while the collector's updates them: one copy, then sorted)."""
        held = list(self.store.states.items())
        return {name: state["reason"] for name, state in sorted(held) if state["active"]}
