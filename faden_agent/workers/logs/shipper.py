"""The shipping thread: backlog -> batches -> Loki -> positions."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from faden_agent.config import Config
from faden_agent.workers.logs.backlog import Backlog
from faden_agent.workers.logs.batcher import Batch, Batcher
from faden_agent.workers.logs.loki.client import MAX_PUSHES_IN_FLIGHT, Outcome, Pusher
from faden_agent.workers.logs.loki.destinations import DirectLoki, make_target
from faden_agent.workers.logs.positions import Positions
from faden_agent.workers.logs.report import report_event

if TYPE_CHECKING:
    from faden_agent.protocol.status import ShippedCounts, ShipperStatus

REPORT_INTERVAL_S = 60.0
log = logging.getLogger(__name__)


class _Pending:
    __slots__ = ("batch", "done", "outcome")

    def __init__(self, batch: Batch, done: bool = False, outcome: Outcome | None = None) -> None:
        self.batch = batch
        self.done = done
        self.outcome = outcome  # None when done: given up because the worker stops


class Shipper:
    """Its run() is the worker's "logs-shipper" thread."""

    def __init__(self, config: Config, backlog: Backlog, positions: Positions, stop_event: threading.Event):
        self.config = config
        self.backlog = backlog
        self.positions = positions
        self.stop_event = stop_event
        self.target = make_target(config)
        self.pusher = Pusher(
            self.target,
            config.reconnect_min_sec,
            config.reconnect_max_sec,
            stop_event.wait,
            config.loki_structured_metadata,
        )
        self.batcher = Batcher(backlog, config.log_batch_size, config.log_flush_interval_sec)
        self.totals = Outcome()
        self.batches = 0
        self.unreported = Outcome()
        self.reported_at = -REPORT_INTERVAL_S  # the first loss is reported at once
        self._in_flight: deque[_Pending] = deque()  # in batch order
        self._done = threading.Condition()
        self._sender_error: BaseException | None = None

    def run(self) -> None:
        # The backend route keeps one push at a time: ViaBackend re-resolves its target
        # between pushes, which is not something to race.
        lanes = MAX_PUSHES_IN_FLIGHT if isinstance(self.target, DirectLoki) else 1
        with ThreadPoolExecutor(lanes, thread_name_prefix="logs-push") as senders:
            while not self.stop_event.is_set():
                with self._done:
                    while len(self._in_flight) >= lanes and not self.stop_event.is_set() and not self._sender_error:
                        self._done.wait(1.0)
                if self._sender_error is not None:
                    raise self._sender_error
                batch = self.batcher.collect()
                if batch is not None and not self.stop_event.is_set():
                    pending = _Pending(batch)
                    with self._done:
                        self._in_flight.append(pending)
                    senders.submit(self._send, pending)
                self.positions.save()  # what sources changed themselves (a forgotten container)
                self.report_losses()
            self.stop_event.set()  # senders still retrying give up at once
        self.positions.save(force=True)

    def _send(self, pending: _Pending) -> None:
        try:
            pending.outcome = self.pusher.push(pending.batch.entries)
        except BaseException as exc:  # raised again by run(): the shipper thread fails visibly
            self._sender_error = exc
            raise
        finally:
            pending.done = True
            self._complete()

    def _complete(self) -> None:
        """Store the positions of the finished batches at the head, in order, and save them."""
        with self._done:
            advanced = False
            while self._in_flight and self._in_flight[0].done:
                pending = self._in_flight[0]
                if pending.outcome is None:
                    break  # stopping: it and everything after it stay where they were
                self._in_flight.popleft()
                self.positions.advance(pending.batch.positions())
                self.batches += 1
                self.totals += pending.outcome
                self.unreported += Outcome(
                    sources={k: [0, *c[1:]] for k, c in pending.outcome.sources.items() if c[1] or c[2]}
                )
                advanced = True
            self._done.notify_all()
        if advanced:  # outside the lock: status() (the worker's liveness) must not wait on an fsync
            self.positions.save()

    def report_losses(self, force: bool = False) -> None:
        """One logs.lines_lost event per source whose lines Loki refused (reason `refused`)."""
        if not self.unreported.sources:
            return
        if not force and time.monotonic() - self.reported_at < REPORT_INTERVAL_S:
            return
        with self._done:  # senders add to it
            due, self.unreported = self.unreported, Outcome()
        for kind, (_, rejected, dropped) in list(due.sources.items()):
            data = {
                "type": "logs.lines_lost",
                "source": kind,
                "count": rejected + dropped,
                "at_least": False,
                "reason": "refused",
                "message": f"Loki refused {rejected} log lines (HTTP 400) and {dropped} over-large lines (HTTP 413)",
                "rejected": rejected,
                "too_large": dropped,
                "target": str(self.target),
                "detail": self.pusher.last_rejection,  # Loki's words for the last refusal
            }
            if not report_event(self.config, data):
                break
            del due.sources[kind]
        with self._done:
            self.unreported += due  # what could not be reported: tried again next interval
        self.reported_at = time.monotonic()

    def in_flight(self) -> int:
        """Lines in pushes Loki has not accepted yet."""
        with self._done:
            return sum(len(p.batch) for p in self._in_flight)

    def source_counts(self) -> dict[str, ShippedCounts]:
        """Per source kind: lines Loki stored (lines_shipped) and refused for good (lines_refused)."""
        with self._done:
            return {
                kind: {"lines_shipped": accepted, "lines_refused": rejected + dropped}
                for kind, (accepted, rejected, dropped) in self.totals.sources.items()
            }

    def status(self) -> ShipperStatus:
        return {
            "target": str(self.target),
            "lines_shipped": self.totals.accepted,
            "lines_rejected": self.totals.rejected,
            "lines_too_large": self.totals.dropped,
            "batches": self.batches,
            "push_retries": self.pusher.retries,
            "push_retries_by_status": self.pusher.retries_by_status,
            "bytes_pushed": self.pusher.bytes_pushed,
            "push_seconds": self.pusher.push_seconds.snapshot(),
            "structured_metadata": self.pusher.with_metadata,
            "last_rejection": self.pusher.last_rejection,
            "last_push_error": self.pusher.last_error,
            "target_state": self.target_state(),
        }

    def target_state(self) -> str:
        """resolving (asking the backend where to push), ok, or failing (the last push failed)."""
        if self.pusher.last_error:
            return "failing"
        return "ok" if self.target.resolved else "resolving"
