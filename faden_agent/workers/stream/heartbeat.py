"""Heartbeats: every HEARTBEAT_INTERVAL_SEC on a fixed grid, sent directly (not queued
behind a backlog), carrying version, capabilities, uptime and the supervisor's worker table.

A heartbeat is latest-value: one that cannot be sent is dropped, the next one replaces it.
Beats are due at start + n * interval; a late beat does not shift the ones after it, and
beats missed entirely (an outage) are skipped, not sent in a burst.
"""

from __future__ import annotations

import logging
import math
import os
import time
from typing import Any

from faden_agent import __version__, protocol
from faden_agent.backend import BackendClient, BackendError
from faden_agent.ipc import EnvelopeError, request
from faden_agent.outbox import make_record
from faden_agent.workers.stream.link import Link, LinkThread

log = logging.getLogger(__name__)

PS_TIMEOUT_S = 0.5
WORKER_FIELDS = ("name", "state", "pid", "uptime_s", "restarts", "last_exit", "heartbeat_age_s", "rss_bytes",
                 "cpu_percent", "status")


class HeartbeatSender(LinkThread):
    def __init__(self, link: Link):
        super().__init__("heartbeat", link)
        self.started_at = time.time()
        self.beats = 0

    def run(self) -> None:
        interval = self.config.heartbeat_interval_sec
        client = BackendClient(self.config, self.state.credential)
        start_mono, start_wall = time.monotonic(), time.time()
        beat = 0
        try:
            while not self.stop.wait(max(0.0, start_mono + beat * interval - time.monotonic())):
                if self.gate.remaining() <= 0:
                    self.send(client, beat, start_wall + beat * interval)
                # Next grid point in the future: a beat that cannot be on time is skipped.
                beat = max(beat + 1, math.floor((time.monotonic() - start_mono) / interval) + 1)
        finally:
            client.close()

    def send(self, client: BackendClient, beat: int, due_at: float) -> None:
        record = make_record(protocol.HEARTBEAT, self.heartbeat_data(beat, due_at))
        if self.gate.remaining() > 0:  # another thread was told to wait while we asked `ps`
            return
        try:
            client.uplink([record])
        except BackendError as exc:
            # Latest-value: no retry of this beat; the next one waits for the gate the
            # failure may have closed (the fixed grid, not the backoff, paces heartbeats).
            self.back_off(exc)
            log.debug("heartbeat %d not sent: %s", beat, exc)
        else:
            self.beats += 1
            self.backoff.reset()
            self.status.contact()

    def heartbeat_data(self, beat: int, due_at: float) -> dict[str, Any]:
        table = self.worker_table()
        supervisor = table.get("supervisor") or {}
        return {
            "agent_id": self.state.agent_id,
            "node_id": self.state.node_id,
            "version": __version__,
            "protocol": protocol.PROTOCOL_VERSION,
            "capabilities": list(protocol.CAPABILITIES),
            "uptime_s": supervisor.get("uptime_s", time.time() - self.started_at),
            "beat": beat,
            "due_at": due_at,
            "interval_sec": self.config.heartbeat_interval_sec,
            "supervisor": supervisor,
            "workers": [{k: w.get(k) for k in WORKER_FIELDS} for w in table.get("workers", [])],
            "connection": self.status.snapshot(),
            "outbox_pending": self.outbox.count(),
            # the first worker that cannot write its files: {"path", "error", "since", "paths"}
            "disk_full": next((w["status"]["disk_full"] for w in table.get("workers", [])
                               if isinstance(w.get("status"), dict) and w["status"].get("disk_full")), None),
            "pid": os.getpid(),
        }

    def worker_table(self) -> dict[str, Any]:
        """The supervisor's `ps` table; empty when it does not answer in time."""
        try:
            reply = request(self.endpoints.control, "ps", timeout_s=PS_TIMEOUT_S)
        except EnvelopeError:
            return {}
        return reply.body if reply is not None and isinstance(reply.body, dict) else {}
