"""Heartbeats: every HEARTBEAT_INTERVAL_SEC on a fixed grid, sent directly (not queued
behind a backlog).
"""

from __future__ import annotations

import logging
import math
import os
import time
from typing import Any

from faden_agent import __version__, protocol
from faden_agent.backend.client import BackendClient, BackendError
from faden_agent.backend.outbox import make_record
from faden_agent.ipc.control import LOOP_WAIT_S, Control
from faden_agent.node import backend_accepts, drainstate
from faden_agent.node.fingerprint import fingerprint
from faden_agent.protocol.link import LinkState
from faden_agent.workers.stream.link import Link, LinkThread

log = logging.getLogger(__name__)

SETTLE_MAX_S = 10.0  # the longest the first beat waits for the tree to settle
WORKER_FIELDS = (
    "name",
    "state",
    "pid",
    "uptime_s",
    "restarts",
    "last_exit",
    "alive_age_s",
    "heartbeat_age_s",  # alive_age_s's old name, sent for one release
    "rss_bytes",
    "cpu_percent",
    "status",
)
WORKER_STATE_FIELDS = ("name", "state", "pid", "restarts", "last_exit")  # numbers here are states too
# Parts of a worker's status for this machine only, which the backend has from other records:
# `gauges`, the figures /metrics reads (per GPU, disk, peer: 8.7 KB of a detail beat for 8 GPUs;
# the inventory and traffic records carry them), `placement`, `faden-agent status`'s summary of
# the inventory's labels and topology.
LOCAL_ONLY = ("gauges", "placement")


class HeartbeatSender(LinkThread):
    def __init__(self, link: Link):
        super().__init__("heartbeat", link)
        self.started_at = time.time()
        self.beats = 0
        self.detail_sent: tuple[Any, float] | None = None  # (change key, monotonic time) of the last detail sent
        self.supervisor = Control(self.config.runtime_dir, LOOP_WAIT_S)

    def run(self) -> None:
        interval = self.config.heartbeat_interval_sec
        client = BackendClient(self.config, self.membership.credential)
        try:
            self.settle()
            start_mono, start_wall = time.monotonic(), time.time()
            beat = 0
            while not self.stop_event.wait(max(0.0, start_mono + beat * interval - time.monotonic())):
                if self.gate.remaining() <= 0:
                    self.send(client, beat, start_wall + beat * interval)
                beat = next_beat(beat, time.monotonic() - start_mono, interval)
        finally:
            client.close()
            self.supervisor.close()

    def settle(self) -> None:
        """Wait until the tree has started and its detail holds still (see the module's text)."""
        deadline = time.monotonic() + min(self.config.heartbeat_interval_sec, SETTLE_MAX_S)
        last_key = None
        while (left := deadline - time.monotonic()) > 0:
            table = self.worker_table()
            started = bool(table.get("workers")) and all(
                w.get("state") != "STARTING" and not (w.get("status") or {}).get("starting") for w in table["workers"]
            )
            connected = self.link_status.connection == LinkState.CONNECTED
            key = change_key(self.detail(table)) if started and connected else None
            if key is not None and key == last_key:
                return
            last_key = key
            if self.stop_event.wait(min(self.config.worker_liveness_sec, left)):
                return

    def send(self, client: BackendClient, beat: int, due_at: float) -> None:
        data, key = self.heartbeat_data(beat, due_at)
        record = make_record(protocol.HEARTBEAT, data)
        if self.gate.remaining() > 0:  # another thread was told to wait while we asked `ps`
            return
        try:
            client.post_reports([record], gzip=backend_accepts.gzip_accepted(self.config.state_dir))  # a detail
        except BackendError as exc:
            # Latest-value: no retry of this beat; the next one waits for the gate the
            # failure may have closed (the fixed grid, not the backoff, paces heartbeats).
            # The next beat that gets through carries the detail (this one's may be lost).
            self.detail_sent = None
            self.back_off(exc)
            log.debug("heartbeat %d not sent: %s", beat, exc)
        else:
            if "workers" in data:
                self.detail_sent = (key, time.monotonic())
            self.beats += 1
            self.backoff.reset()
            self.link_status.contact()

    def heartbeat_data(self, beat: int, due_at: float) -> tuple[dict[str, Any], Any]:
        """The beat's data (pulse, plus the detail when due) and the detail's change key."""
        table = self.worker_table()
        supervisor = table.get("supervisor") or {}
        pulse = {
            "beat": beat,
            "due_at": due_at,
            "uptime_s": supervisor.get("uptime_s", time.time() - self.started_at),
            "outbox_pending": self.outbox.count(wait_s=0.05),  # None: busy (see Outbox.count)
        }
        if not table:  # the supervisor did not answer in time
            return pulse, None
        detail = self.detail(table)
        key = change_key(detail)
        sent = self.detail_sent
        if sent is None or sent[0] != key or time.monotonic() - sent[1] >= self.config.heartbeat_full_sec:
            pulse.update(detail)
        return pulse, key

    def detail(self, table: dict[str, Any]) -> dict[str, Any]:
        supervisor = table.get("supervisor") or {}
        return {
            "agent_id": self.membership.agent_id,
            "node_id": self.membership.node_id,
            "version": __version__,
            "protocol": protocol.PROTOCOL_VERSION,
            "capabilities": list(protocol.CAPABILITIES),
            "fingerprint": fingerprint(self.config.sysfs_root),
            "interval_sec": self.config.heartbeat_interval_sec,
            "supervisor": supervisor,
            "workers": [_row(w) for w in table.get("workers", [])],
            "connection": self.link_status.snapshot(),
            "drain": drainstate.heartbeat_view(self.config.state_dir),  # cordoned, draining, drained
            # the first worker that cannot write its files: {"path", "error", "since", "paths"}
            "disk_full": next(
                (
                    w["status"]["disk_full"]
                    for w in table.get("workers", [])
                    if isinstance(w.get("status"), dict) and w["status"].get("disk_full")
                ),
                None,
            ),
            "pid": os.getpid(),
        }

    def worker_table(self) -> dict[str, Any]:
        """The supervisor's `ps` table; empty when it does not answer in time."""
        return self.supervisor.ps() or {}


def next_beat(beat: int, elapsed_s: float, interval_s: float) -> int:
    """The grid point to send after `beat`, `elapsed_s` after the first: the next one, or,
    when the send ran past it, the latest one due (sent at once, late)."""
    return max(beat + 1, math.floor(elapsed_s / interval_s))


def change_key(detail: dict[str, Any]) -> Any:
    """What must reach the backend when it changes: the detail without its numbers, except
    the workers' identity and restart fields (numbers that are states)."""
    rows = [
        tuple(w.get(k) for k in WORKER_STATE_FIELDS) + (states_only(w.get("status")),)
        for w in detail.get("workers", [])
    ]
    rest = {k: v for k, v in detail.items() if k not in ("workers", "supervisor")}
    return (tuple(rows), states_only(rest), (detail.get("supervisor") or {}).get("pid"))


def _row(worker: dict[str, Any]) -> dict[str, Any]:
    """A worker's row as the backend gets it: its status without the LOCAL_ONLY parts."""
    row = {k: worker.get(k) for k in WORKER_FIELDS}
    status = row.get("status")
    if isinstance(status, dict) and any(key in status for key in LOCAL_ONLY):
        row["status"] = {k: v for k, v in status.items() if k not in LOCAL_ONLY}
    return row


def detail_changes(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """What differs between two details in change_key's terms (`logs.status.target`,
    `executor.pid`, `connection`): why a beat carried the whole detail (the bench, the tests)."""
    if old is None:
        return ["(no detail before it)"]
    changed = []
    old_rows = {w.get("name"): w for w in old.get("workers", [])}
    for row in new.get("workers", []):
        was = old_rows.get(row.get("name"), {})
        changed += [f"{row.get('name')}.{f}" for f in WORKER_STATE_FIELDS if row.get(f) != was.get(f)]
        old_status, new_status = _status_pairs(was.get("status")), _status_pairs(row.get("status"))
        changed += [f"{row.get('name')}.status" + (f".{key}" if key else "") for key, _ in new_status ^ old_status]
    for key in new.keys() - {"workers", "supervisor", "beat", "due_at", "uptime_s", "outbox_pending"}:
        if states_only(new.get(key)) != states_only(old.get(key)):
            changed.append(key)
    return sorted(set(changed)) or ["nothing: a beat not sent before it, or the full refresh"]


def _status_pairs(status: Any) -> set[tuple[str, Any]]:
    """A worker's status as (key, states) pairs; a status that is no object is one pair."""
    states = states_only(status)
    return set(states) if isinstance(status, dict) else {("", states)}


def states_only(value: Any) -> Any:
    """`value` with every number left out (counters, ages, sizes, times), hashable."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), states_only(v)) for k, v in value.items() if not _is_number(v)))
    if isinstance(value, (list, tuple)):
        return tuple(states_only(v) for v in value if not _is_number(v))
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
