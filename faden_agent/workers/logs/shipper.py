"""The shipping thread: backlog -> batches -> Loki -> positions.

Up to MAX_PUSHES_IN_FLIGHT batches are pushed at once (sender threads), so the batch size
bounds a push, not the throughput: while Loki works on one push the next is encoded and
sent. Loki takes entries of one stream out of order within its window (unordered writes,
Loki's default since 2.4), so concurrent pushes are fine for it. Completions are taken in
batch order: a batch's positions are stored (and saved) only after Loki accepted it (2xx)
or finally refused it (400) AND every batch before it was done, so whatever was read but
not accepted is read again after a crash, and a kill -9 resends at most the batches in
flight. Lines Loki refused (400) or that were too large even alone (413) are counted and
reported to the backend as one "logs.lines_lost" event per REPORT_INTERVAL_SEC.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from faden_agent import protocol
from faden_agent.config import Config
from faden_agent.workers.logs.backlog import Backlog
from faden_agent.workers.logs.batcher import Batch, Batcher
from faden_agent.workers.logs.loki import MAX_PUSHES_IN_FLIGHT, Outcome, Pusher
from faden_agent.workers.logs.positions import Positions
from faden_agent.workers.logs.targets import DirectLoki, make_target

REPORT_INTERVAL_SEC = 60.0
log = logging.getLogger(__name__)


@dataclass
class _Pending:
    batch: Batch
    done: bool = False
    outcome: Outcome | None = None  # None when done: given up because the worker stops


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
        self.reported_at = -REPORT_INTERVAL_SEC  # the first loss is reported at once
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
                self.unreported += Outcome(rejected=pending.outcome.rejected, dropped=pending.outcome.dropped)
                advanced = True
            if advanced:
                self.positions.save()
            self._done.notify_all()

    def report_losses(self, force: bool = False) -> None:
        lost = self.unreported
        if not (lost.rejected or lost.dropped):
            return
        if not force and time.monotonic() - self.reported_at < REPORT_INTERVAL_SEC:
            return
        data = {
            "type": "logs.lines_lost",
            "message": (
                f"Loki refused {lost.rejected} log lines (HTTP 400) and {lost.dropped} over-large lines (HTTP 413)"
            ),
            "rejected": lost.rejected,
            "too_large": lost.dropped,
            "target": str(self.target),
            "reason": self.pusher.last_rejection,
        }
        try:
            from faden_agent.reports.producer import Reports

            reports = Reports(self.config)
            try:
                reports.put(protocol.EVENT, data)
            finally:
                reports.close()
        except Exception as exc:  # noqa: BLE001 - keep the count and try again next interval
            log.warning("logs: could not report lost log lines (%s)", exc)
            return
        self.unreported = Outcome()
        self.reported_at = time.monotonic()

    def status(self) -> dict[str, object]:
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
        }
