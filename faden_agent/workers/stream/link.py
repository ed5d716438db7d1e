"""What the stream worker's threads share about the backend link: the Gate (the one maintenance
hold and a rejected credential's slow retry), wait_after (the one map from a failed exchange to a
state and a wait) and Link/LinkThread, what every link thread is given (its LinkStatus too:
node/linkstatus.py).
"""

from __future__ import annotations

import threading
import time
from typing import NamedTuple

from faden_agent.backend.client import BackendError, CredentialRejected, Maintenance, MaintenanceHold, TokenRefused
from faden_agent.backend.outbox import Outbox
from faden_agent.common.backoff import Backoff
from faden_agent.config import Config
from faden_agent.ipc import Endpoints
from faden_agent.node.linkstatus import LinkStatus
from faden_agent.node.membership import Membership
from faden_agent.protocol.link import LinkState
from faden_agent.workers.threads import RestartRequested


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


def wait_after(error: BackendError, backoff: Backoff, slow_s: float) -> tuple[LinkState, float]:
    """The connection state a failed exchange with the backend means, and how long to wait before
    the next one: the single rule for enrollment, downlink, uplink and heartbeat."""
    if isinstance(error, Maintenance):
        return LinkState.MAINTENANCE, error.retry_after or 0.0  # the client already set the shared hold
    if isinstance(error, CredentialRejected):
        return LinkState.CREDENTIAL_REJECTED, slow_s  # retried slowly, never re-enrolled without a new token
    if isinstance(error, TokenRefused):
        return LinkState.ENROLLMENT_REFUSED, slow_s
    return LinkState.BACKOFF, backoff.next_delay(error.retry_after)


class Link(NamedTuple):
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

    def back_off(self, error: BackendError) -> tuple[LinkState, float]:
        """wait_after, plus: a rejected credential holds every link thread, not only this one."""
        connection, delay = wait_after(error, self.backoff, self.config.reconnect_max_sec)
        if connection == LinkState.CREDENTIAL_REJECTED:
            self.gate.hold(delay)
        return connection, delay
