"""Timeline records of commands, with deterministic ids so every re-emission dedups."""

from __future__ import annotations

from typing import Any

from faden_agent import protocol
from faden_agent.backend.producer import Reports
from faden_agent.common import testhooks
from faden_agent.disk.diskfull import DiskFull
from faden_agent.workers.executor.journal import Entry, Journal
from faden_agent.workers.executor.kinds import KINDS

PROGRESS_STEPS_PER_ATTEMPT = 1_000_000


def known_kind(kind: str) -> str:
    """The kind as a metric label: one of the registered kinds, else "other"."""
    return kind if kind in KINDS else "other"


class Timeline:
    def __init__(self, reports: Reports, journal: Journal):
        self.reports = reports
        self.journal = journal
        self.unreported = False  # a terminal record could not be put (full disk): report_unreported soon
        # For /metrics, by bounded words: kind -> received; kind -> state -> reason -> ended
        self.received_counts: dict[str, int] = {}
        self.ended_counts: dict[str, dict[str, dict[str, int]]] = {}

    def _put(self, command_id: str, state: str, step: int, **fields: Any) -> None:
        data = protocol.timeline_data(command_id, state, **fields)
        self.reports.put(protocol.TIMELINE, data, record_id=protocol.timeline_record_id(command_id, state, step))

    def received(self, command_id: str, kind: str, seq: int | None) -> None:
        self._put(command_id, protocol.RECEIVED, 0, kind=kind, seq=seq)
        self.received_counts[known_kind(kind)] = self.received_counts.get(known_kind(kind), 0) + 1

    def started(self, command_id: str, attempt: int) -> None:
        self._put(command_id, protocol.STARTED, attempt - 1, attempt=attempt)

    def progress(self, command_id: str, attempt: int, step: int, **fields: Any) -> None:
        self._put(command_id, protocol.PROGRESS, attempt * PROGRESS_STEPS_PER_ATTEMPT + step, **fields)

    def finish(self, command_id: str, state: str, reason: str, message: str, **result: Any) -> bool:
        """Record and send the terminal state; False when the command had already ended."""
        data = protocol.timeline_data(command_id, state, reason=reason, message=message, **result)
        if not self.journal.finish(command_id, data):
            return False
        entry = self.journal.get(command_id)
        reasons = self.ended_counts.setdefault(known_kind(entry.kind if entry else ""), {}).setdefault(state, {})
        known_reason = reason if reason in protocol.REASONS else "other"
        reasons[known_reason] = reasons.get(known_reason, 0) + 1
        testhooks.kill_between("done", "outbox")
        self._put_terminal(command_id, data)
        return True

    def _put_terminal(self, command_id: str, outcome: dict[str, Any]) -> None:
        fields = {k: v for k, v in outcome.items() if k not in ("command_id", "state")}
        try:
            self._put(command_id, outcome["state"], 0, **fields)
            self.journal.mark_reported(command_id)
        except DiskFull:
            self.unreported = True  # done in the journal: the executor's tick puts it later
            raise

    def replay(self, entry: Entry) -> None:
        """A re-delivered, already finished command: the same records again (same ids)."""
        self.received(entry.id, entry.kind, entry.seq)
        if entry.outcome:
            self._put_terminal(entry.id, entry.outcome)

    def report_unreported(self) -> int:
        """Terminal records of done commands that never reached the outbox (a kill between
        the two writes, a full disk): put them there now. Returns how many."""
        self.unreported = False
        entries = self.journal.unreported()
        for entry in entries:
            if entry.outcome:
                self._put_terminal(entry.id, entry.outcome)
        return len(entries)
