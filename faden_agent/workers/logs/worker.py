"""The log shipper worker. Its loop: "alive" to the supervisor and a quick health check of each reader.
Its inputs: journald, managed containers' logs, Ray log files, captures (one reader thread each);
the executor's `drain` questions and the stream worker's `flush` (a shutdown) on its REP socket.
Its output: Loki pushes from one shipping thread; losses reported as events via Reports.
"""

from __future__ import annotations

import gc
import logging
import os
from typing import TYPE_CHECKING

import zmq

from faden_agent.disk.files import quarantine_record_id
from faden_agent.ipc import Channel, Message
from faden_agent.workers.base import Worker
from faden_agent.workers.logs.backlog import Backlog
from faden_agent.workers.logs.labels import LabelMaker
from faden_agent.workers.logs.positions import Positions
from faden_agent.workers.logs.report import report_event
from faden_agent.workers.logs.shipper import Shipper
from faden_agent.workers.logs.sources import Shared, Source
from faden_agent.workers.logs.sources.captures import CapturesSource
from faden_agent.workers.logs.sources.containers.source import ContainersSource
from faden_agent.workers.logs.sources.journald.source import JournaldSource
from faden_agent.workers.logs.sources.managed import ManagedNames
from faden_agent.workers.logs.sources.ray.source import RaySource

if TYPE_CHECKING:
    from faden_agent.protocol.status import LogSourceStatus, LogsStatus, ShippedCounts

log = logging.getLogger(__name__)
# The collector's young generation, counted in tracked objects alive (net of those freed):
# well above what a flood keeps alive in the pipeline (a full backlog, 10,000 lines, and the
# block being parsed: about 14,000 objects, tests/unit/logs/test_logs_collector.py; the
# pushes in flight besides), so its lines are freed unwalked instead of walked and promoted
# while they wait (8-12% of the worker's CPU at the default 700: docs/benchmarks.md, round 17).
YOUNG_GENERATION = 50_000


class LogsWorker(Worker):
    name = "logs"
    # The readers' checks are about minutes (journalctl silent for 5 min): an idle loop wakes
    # every 5 s for them, not every second.
    tick_interval_s = 5.0

    def setup(self) -> None:
        lower_priority(self.config.log_nice)
        gc.set_threshold(YOUNG_GENERATION, *gc.get_threshold()[1:])
        self.backlog = Backlog()
        self.positions = Positions(self.config.state_dir)
        if self.positions.quarantined:
            report_event(self.config, self.positions.quarantined, quarantine_record_id(self.positions.quarantined))
        self.shipper = Shipper(self.config, self.backlog, self.positions, self.stop_event)
        labels = LabelMaker(self.config)
        managed = ManagedNames()  # listed by the containers source; the Ray source's retention reads it
        shared = Shared(self.config, self.backlog, self.positions, labels, self.stop_event, self.start_thread)
        self.containers = ContainersSource(shared, managed)
        self.sources: list[Source] = [
            JournaldSource(shared),
            self.containers,
            RaySource(shared, managed),
            CapturesSource(shared),
        ]
        self.start_thread("logs-shipper", self.shipper.run)
        for source in self.sources:
            source.start()

    def channels(self) -> list[Channel]:
        self.requests = Channel.bind(zmq.REP, self.endpoints.logs)
        return [self.requests]

    def handle(self, channel: Channel, message: Message) -> None:
        """`drain` {"container_id", "started_at"?}: whether that stopped container's lines
        (of its run that started then) are all shipped (answered at once; the executor asks
        again until true or its deadline)."""
        if message.type == "flush":  # the machine goes down: ship at once; how many lines are still to go
            self.backlog.hurry()
            channel.send("flush", {"pending": len(self.backlog) + self.shipper.in_flight()})
            return
        body = message.body if isinstance(message.body, dict) else {}
        container_id, started_at = body.get("container_id"), body.get("started_at")
        if message.type != "drain" or not isinstance(container_id, str) or len(container_id) > 128:
            channel.send("error", {"message": f"unexpected request {message.type!r}"[:200]})
            return
        if not isinstance(started_at, str) or len(started_at) > 64:
            started_at = None
        channel.send("drain", {"drained": self.containers.drained(container_id, started_at)})

    def tick(self) -> None:
        for source in self.sources:
            source.check()

    def status(self) -> LogsStatus:
        return {
            **self.shipper.status(),
            "backlog_lines": len(self.backlog),
            "backlog_bytes": self.backlog.bytes,
            "backlog_full_waits": self.backlog.blocked_puts,
            "sources": self.source_status(),
        }

    def source_status(self) -> dict[str, LogSourceStatus]:
        """Each source's own status and its account: lines_read = lines_shipped +
        lines_refused + lines_lost + what is still in the backlog or in flight."""
        counts = self.shipper.source_counts()
        none: ShippedCounts = {"lines_shipped": 0, "lines_refused": 0}
        return {source.kind: {**source.status(), **counts.get(source.kind, none)} for source in self.sources}

    def teardown(self) -> None:
        self.backlog.close()
        for source in self.sources:
            source.stop()
        self.join_threads()  # lets a push in flight finish, within the worker's join budget
        self.positions.save(force=True)


def lower_priority(increment: int) -> None:
    """Adds `increment` to this thread's nice value, before the worker starts its threads and
    journalctl (they inherit it). Shipping is bulk work: on a busy machine a log flood then
    yields the CPU to the stream worker's heartbeats and the executor (the beats' lateness
    under a flood, at nice 0 and 10: docs/logs.md)."""
    if increment <= 0:
        return
    try:
        os.nice(increment)
    except OSError as exc:
        log.warning(
            "logs: cannot lower the log worker's CPU priority by %d (%s); shipping at the agent's", increment, exc
        )
