"""The shipping thread: backlog -> batches -> Loki -> positions.

One batch at a time, in order: a batch's positions are stored only after Loki accepted it
(2xx) or finally refused it (400), so whatever was read but not accepted is read again
after a crash. Lines Loki refused (400) or that were too large even alone (413) are counted
and reported to the backend as one "logs.lines_lost" event per REPORT_INTERVAL_SEC.
"""

from __future__ import annotations

import logging
import threading
import time

from faden_agent import protocol
from faden_agent.config import Config
from faden_agent.workers.logs.backlog import Backlog
from faden_agent.workers.logs.batcher import Batcher
from faden_agent.workers.logs.loki import Outcome, Pusher
from faden_agent.workers.logs.positions import Positions
from faden_agent.workers.logs.targets import make_target

REPORT_INTERVAL_SEC = 60.0
log = logging.getLogger(__name__)


class Shipper:
    """Its run() is the worker's "logs-shipper" thread."""

    def __init__(self, config: Config, backlog: Backlog, positions: Positions, stop_event: threading.Event):
        self.config = config
        self.backlog = backlog
        self.positions = positions
        self.stop_event = stop_event
        self.target = make_target(config)
        self.pusher = Pusher(self.target, config.reconnect_min_sec, config.reconnect_max_sec, stop_event.wait,
                             config.loki_structured_metadata)
        self.batcher = Batcher(backlog, config.log_batch_size, config.log_flush_interval_sec)
        self.totals = Outcome()
        self.batches = 0
        self.unreported = Outcome()
        self.reported_at = -REPORT_INTERVAL_SEC  # the first loss is reported at once

    def run(self) -> None:
        while not self.stop_event.is_set():
            batch = self.batcher.collect()
            if batch is not None:
                outcome = self.pusher.push(batch.entries)
                if outcome is None:
                    break  # stopping: its positions stay where they were
                self.positions.advance(batch.positions())
                self.batches += 1
                self.totals += outcome
                self.unreported += Outcome(rejected=outcome.rejected, dropped=outcome.dropped)
            self.positions.save()
            self.report_losses()
        self.positions.save(force=True)

    def report_losses(self, force: bool = False) -> None:
        lost = self.unreported
        if not (lost.rejected or lost.dropped):
            return
        if not force and time.monotonic() - self.reported_at < REPORT_INTERVAL_SEC:
            return
        data = {
            "type": "logs.lines_lost",
            "message": f"Loki refused {lost.rejected} log lines (HTTP 400) and {lost.dropped} over-large lines (HTTP 413)",
            "rejected": lost.rejected,
            "too_large": lost.dropped,
            "target": str(self.target),
            "reason": self.pusher.last_rejection,
        }
        try:
            from faden_agent.uplink import Uplink

            uplink = Uplink(self.config)
            try:
                uplink.put(protocol.EVENT, data)
            finally:
                uplink.close()
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
            "structured_metadata": self.pusher.with_metadata,
            "last_rejection": self.pusher.last_rejection,
            "last_push_error": self.pusher.last_error,
        }
