"""The log shipper worker. Its loop: heartbeat and a quick health check of each reader.
Its inputs: journald, managed containers' logs, Ray Serve files (one reader thread each).
Its output: Loki pushes from one shipping thread; losses reported as events via Uplink.

All blocking work (journalctl, Docker, files, HTTP) runs in threads, so the heartbeat from
the main loop never waits for it.
"""

from __future__ import annotations

from typing import Any

from faden_agent.files import quarantine_record_id
from faden_agent.workers.base import Worker
from faden_agent.workers.logs.backlog import Backlog
from faden_agent.workers.logs.labels import LabelMaker
from faden_agent.workers.logs.positions import Positions
from faden_agent.workers.logs.report import report_event
from faden_agent.workers.logs.shipper import Shipper
from faden_agent.workers.logs.sources.containers import ContainerSource
from faden_agent.workers.logs.sources.files import RayFileSource
from faden_agent.workers.logs.sources.journal import JournalSource


class LogsWorker(Worker):
    name = "logs"

    def setup(self) -> None:
        self.backlog = Backlog()
        self.positions = Positions(self.config.state_dir)
        if self.positions.quarantined:
            report_event(self.config, self.positions.quarantined, quarantine_record_id(self.positions.quarantined))
        self.shipper = Shipper(self.config, self.backlog, self.positions, self.stop_event)
        labels = LabelMaker(self.config)
        self.sources = [
            source(self.config, self.backlog, self.positions, labels, self.stop_event)
            for source in (JournalSource, ContainerSource, RayFileSource)
        ]
        self.start_thread("logs-shipper", self.shipper.run)
        for source in self.sources:
            source.start(self.start_thread)

    def tick(self) -> None:
        for source in self.sources:
            source.check()

    def status(self) -> dict[str, Any]:
        return {
            **self.shipper.status(),
            "backlog_lines": len(self.backlog),
            "backlog_bytes": self.backlog.bytes,
            "backlog_full_waits": self.backlog.blocked_puts,
            "sources": {source.kind: source.status() for source in self.sources},
        }

    def teardown(self) -> None:
        self.backlog.close()
        for source in self.sources:
            source.stop()
        self.join_threads()  # lets a push in flight finish, within the worker's join budget
        self.positions.save(force=True)
