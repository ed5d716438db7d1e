"""What the stream worker's threads share about the backend link: Connection states,
LinkStatus (also kept in the 0600 status file), the Gate (the one maintenance hold and a
rejected credential's slow retry), wait_after (the one map from a failed exchange to a state and
a wait) and Link/LinkThread, what every link thread is given. Notes: docs/design-notes.md.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import orjson

from faden_agent.backend import BackendError, CredentialRejected, Maintenance, MaintenanceHold, TokenRefused
from faden_agent.backoff import Backoff
from faden_agent.config import Config
from faden_agent.disk.files import replace_file
from faden_agent.ipc import Endpoints
from faden_agent.node.membership import Membership
from faden_agent.redact import redact_text, redact_url
from faden_agent.reports.outbox import Outbox
from faden_agent.workers.threads import RestartRequested

log = logging.getLogger(__name__)

CONTACT_WRITE_EVERY_S = 5.0  # the status file is rewritten on every change of state, contacts throttled


class Connection(StrEnum):
    """The link's connection state, in the order a healthy start passes them; the values
    are what the status file, `status` and `ps` show (a StrEnum: they serialise as is)."""

    STARTING = "starting"
    NOT_ENROLLED = "not_enrolled"
    ENROLLING = "enrolling"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    BACKOFF = "backoff"
    MAINTENANCE = "maintenance"
    CREDENTIAL_REJECTED = "credential_rejected"
    ENROLLMENT_REFUSED = "enrollment_refused"
    STATE_ERROR = "state_error"  # the membership (state) file cannot be used
    CONFIG_ERROR = "config_error"


class LinkStatus:
    def __init__(self, backend_url: str, status_path: Path | None):
        self._lock = threading.Lock()
        self._status_path = status_path
        self._written_at = 0.0
        self._data: dict[str, Any] = {
            "state": Connection.STARTING,  # the key status/ps read: the connection state
            "since": time.time(),
            "backend_url": redact_url(backend_url),
            "node_id": None,
            "last_contact_at": None,
            "last_error": None,
            "last_error_at": None,
            "pid": os.getpid(),
        }

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._data)

    @property
    def connection(self) -> Connection:
        with self._lock:
            return self._data["state"]

    def set_node(self, node_id: str) -> None:
        self._update(node_id=node_id)

    def set_connection(self, connection: Connection, error: str | None = None) -> None:
        changes: dict[str, Any] = {"state": connection}
        if error is not None:
            changes.update(last_error=redact_text(error), last_error_at=time.time())
        self._update(**changes)

    def note(self, **counters: Any) -> None:
        """Counters shown beside the connection state (stale_commands, below_cursor_run, epoch_resets)."""
        self._update(**counters)

    def contact(self) -> None:
        """A successful exchange with the backend."""
        self._update(last_contact_at=time.time())

    def _update(self, **changes: Any) -> None:
        with self._lock:
            if changes.get("state") not in (None, self._data["state"]):
                changes["since"] = time.time()
            important = any(k != "last_contact_at" and self._data.get(k) != v for k, v in changes.items())
            self._data.update(changes)
            now = time.time()
            if not important and now - self._written_at < CONTACT_WRITE_EVERY_S:
                return
            self._written_at = now
            data = dict(self._data, updated_at=now)
        self._write(data)

    def _write(self, data: dict[str, Any]) -> None:
        if self._status_path is None:
            return
        try:
            replace_file(self._status_path, orjson.dumps(data), fsync=False)
        except OSError as exc:
            log.warning("cannot write the status file %s: %s", self._status_path, exc.strerror)


class Gate:
    """No request while the maintenance hold stands or before `not_before` (a rejected
    credential's slow retry); waits are cut short when the worker stops."""

    def __init__(self, stop_event: threading.Event, maintenance: MaintenanceHold):
        self._stop_event = stop_event
        self._maintenance = maintenance
        self._lock = threading.Lock()
        self._not_before = 0.0  # time.monotonic()

    def hold(self, seconds: float) -> None:
        with self._lock:
            self._not_before = max(self._not_before, time.monotonic() + seconds)

    def remaining(self) -> float:
        with self._lock:
            own = self._not_before - time.monotonic()
        return max(0.0, own, self._maintenance.remaining())

    def wait(self) -> bool:
        """Sleep until open; False when the worker is stopping."""
        while not self._stop_event.is_set():
            left = self.remaining()
            if left <= 0:
                return True
            self._stop_event.wait(left)
        return False


class RejoinNeeded(RestartRequested):
    """The backend rejects the credential and an enrollment token is set: the downlink ends,
    so the worker is restarted (workers/threads.py) and enrolls again at start (enroll.py)."""


def wait_after(error: BackendError, backoff: Backoff, slow_s: float) -> tuple[Connection, float]:
    """The connection state a failed exchange with the backend means, and how long to wait before
    the next one: the single rule for enrollment, downlink, uplink and heartbeat."""
    if isinstance(error, Maintenance):
        return Connection.MAINTENANCE, error.retry_after or 0.0  # the client already set the shared hold
    if isinstance(error, CredentialRejected):
        return Connection.CREDENTIAL_REJECTED, slow_s  # retried slowly, never re-enrolled without a new token
    if isinstance(error, TokenRefused):
        return Connection.ENROLLMENT_REFUSED, slow_s
    return Connection.BACKOFF, backoff.next_delay(error.retry_after)


@dataclass(frozen=True)
class Link:
    """The membership and the shared parts every link thread works with."""

    config: Config
    membership: Membership
    outbox: Outbox
    link_status: LinkStatus
    gate: Gate
    stop_event: threading.Event
    endpoints: Endpoints


class LinkThread:
    """One thread's work on the link (run()), with its own backoff."""

    def __init__(self, name: str, link: Link):
        self.name = name
        self.config, self.membership, self.outbox = link.config, link.membership, link.outbox
        self.link_status, self.gate, self.endpoints = link.link_status, link.gate, link.endpoints
        self.stop_event = link.stop_event
        self.backoff = Backoff(link.config.reconnect_min_sec, link.config.reconnect_max_sec)

    def back_off(self, error: BackendError) -> tuple[Connection, float]:
        """wait_after, plus: a rejected credential holds every link thread, not only this one."""
        connection, delay = wait_after(error, self.backoff, self.config.reconnect_max_sec)
        if connection == Connection.CREDENTIAL_REJECTED:
            self.gate.hold(delay)
        return connection, delay
