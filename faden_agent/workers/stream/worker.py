"""Stream worker: owns the backend link (docs/protocol.md)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import zmq

from faden_agent.backend.client import MaintenanceHold
from faden_agent.backend.outbox import OUTBOX_FILE, Outbox
from faden_agent.disk.diskfull import retry_when_full
from faden_agent.ipc import Channel, Message
from faden_agent.node import backend_accepts
from faden_agent.node.linkstatus import LinkStatus, status_path
from faden_agent.workers.base import Worker
from faden_agent.workers.stream.downlink import Downlink
from faden_agent.workers.stream.enroll import Enrollment
from faden_agent.workers.stream.heartbeat import HeartbeatSender
from faden_agent.workers.stream.link import Gate, Link
from faden_agent.workers.stream.shutdown import report_shutdown
from faden_agent.workers.stream.uplink import Uplink

if TYPE_CHECKING:
    from faden_agent.protocol.status import OutboxFigures, StreamStatus

log = logging.getLogger(__name__)


class StreamWorker(Worker):
    name = "stream"

    def setup(self) -> None:
        self.pokes = Channel.bind(zmq.PULL, self.endpoints.reports_ready)
        self.link_status = LinkStatus(self.config.backend_url, status_path(self.config.state_dir))
        self.gate = Gate(self.stop_event, MaintenanceHold(self.config.runtime_dir))
        self.outbox: Outbox | None = None  # opened once this machine is a member (start_link)
        self.uplink: Uplink | None = None
        self.outbox_figures: OutboxFigures | None = None  # depth and oldest record's age, for /metrics
        self.shutdown: str | None = None  # "reporting", then "ready": the machine goes down
        self.start_thread("membership", self.start_link, finite=True)

    def start_link(self) -> None:
        """Become a member (may take long: no token yet, backend down), then run the link;
        a state file that a full disk kept from being written is written afterwards."""
        enrollment = Enrollment(self.config, self.link_status, self.gate, self.stop_event)
        membership = enrollment.establish()
        if membership is None:
            return
        self.link_status.set_node(membership.node_id)
        # Opened here, not in setup: on a full disk a new outbox waits for space on this
        # thread while the worker's loop goes on telling the supervisor it is alive.
        outbox = self.outbox = retry_when_full(
            lambda: Outbox(self.config.state_dir), self.config.state_dir / OUTBOX_FILE, self.stop_event
        )
        shared = Link(self.config, membership, outbox, self.link_status, self.gate, self.stop_event, self.endpoints)
        backend_accepts.forget(self.config.state_dir)  # until this run's first hello says
        self.uplink = Uplink(shared)
        for part in (Downlink(shared), self.uplink, HeartbeatSender(shared)):
            self.start_thread(part.name, part.run)
        enrollment.write_membership_file_when_possible()

    def channels(self) -> list[Channel]:
        return [self.pokes]

    def handle(self, channel: Channel, message: Message) -> None:
        if message.type == "shutting_down" and self.shutdown is None:  # from the supervisor (logind)
            until = (message.body or {}).get("until_mono") if isinstance(message.body, dict) else None
            self.shutdown = "reporting"
            self.start_thread("shutdown", self.report_shutdown, float(until or time.monotonic() + 4), finite=True)
        elif message.type == "shutdown_cancelled" and self.shutdown == "ready":
            self.shutdown = None
            self.link_status.note(shutting_down=False)
        if self.uplink is not None:
            self.uplink.poke()

    def report_shutdown(self, until_mono: float) -> None:
        poke = self.uplink.poke if self.uplink is not None else lambda: None
        report_shutdown(self.config, self.outbox, poke, until_mono, self.stop_event)
        self.link_status.note(shutting_down=True)  # the heartbeats after this one say so
        self.shutdown = "ready"
        self.alive_now()  # the supervisor waits for this status to release the inhibitor

    def status(self) -> StreamStatus:
        status: StreamStatus = {"link": self.link_status.snapshot()}
        outbox = self.outbox
        records = outbox.count(wait_s=0) if outbox is not None else None  # never waits
        if outbox is not None and records is not None:  # a busy outbox: the figures of last time
            oldest = outbox.oldest_ts() if records else None
            self.outbox_figures = {"records": records, "oldest_age_s": time.time() - oldest if oldest else 0.0}
        if self.outbox_figures is not None:
            status["outbox"] = self.outbox_figures
        if self.shutdown is not None:
            status["shutdown"] = self.shutdown
        return status

    def teardown(self) -> None:
        if self.uplink is not None:
            self.uplink.poke()  # it sleeps until poked (SAFETY_S): wake it to see the stop
        self.join_threads()  # a read blocked on a silent stream is left to die with the process
        self.pokes.close()
