"""What the stream worker's threads share about the backend link.

- LinkStatus: connection state, last contact, last error (what `status`/`ps` show), also
  kept in a small 0600 status file so `faden-agent status` can answer while the agent is down;
- Gate: one "not before" time for every request, so a 503 Retry-After or a rejected
  credential seen by one thread holds back all of them;
- Backoff: exponential backoff with full jitter between RECONNECT_MIN and RECONNECT_MAX;
- Link + LinkThread: what every link thread (downlink, uplink, heartbeat) is given.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from faden_agent.config import Config
from faden_agent.files import replace_file
from faden_agent.ipc import Endpoints
from faden_agent.outbox import Outbox
from faden_agent.state import AgentState

log = logging.getLogger(__name__)

CONTACT_WRITE_EVERY_S = 5.0  # the status file is rewritten on every change of state, contacts throttled

# Connection states, in the order a healthy start passes them.
STARTING = "starting"
NOT_ENROLLED = "not_enrolled"
ENROLLING = "enrolling"
CONNECTING = "connecting"
CONNECTED = "connected"
BACKOFF = "backoff"
MAINTENANCE = "maintenance"
CREDENTIAL_REJECTED = "credential_rejected"
ENROLLMENT_REFUSED = "enrollment_refused"
STATE_ERROR = "state_error"
CONFIG_ERROR = "config_error"


class LinkStatus:
    def __init__(self, backend_url: str, status_path: Path | None):
        self._lock = threading.Lock()
        self._status_path = status_path
        self._written_at = 0.0
        self._data: dict[str, Any] = {
            "state": STARTING,
            "since": time.time(),
            "backend_url": backend_url,
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
    def state(self) -> str:
        with self._lock:
            return self._data["state"]

    def set_node(self, node_id: str) -> None:
        self._update(node_id=node_id)

    def set_state(self, state: str, error: str | None = None) -> None:
        changes: dict[str, Any] = {"state": state}
        if error is not None:
            changes.update(last_error=error, last_error_at=time.time())
        self._update(**changes)

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
    """No request before `not_before`; waits are cut short when the worker stops."""

    def __init__(self, stop: threading.Event):
        self._stop = stop
        self._lock = threading.Lock()
        self._not_before = 0.0  # time.monotonic()

    def hold(self, seconds: float) -> None:
        with self._lock:
            self._not_before = max(self._not_before, time.monotonic() + seconds)

    def remaining(self) -> float:
        with self._lock:
            return max(0.0, self._not_before - time.monotonic())

    def wait(self) -> bool:
        """Sleep until open; False when the worker is stopping."""
        while not self._stop.is_set():
            left = self.remaining()
            if left <= 0:
                return True
            self._stop.wait(left)
        return False


class Backoff:
    """Delay n (from 0) is uniform in [min, min(max, min * 2**n)]: full jitter, floored at min."""

    def __init__(self, min_s: float, max_s: float, rng: random.Random | None = None):
        self.min_s, self.max_s = min_s, max_s
        self.attempt = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        cap = min(self.max_s, self.min_s * (2 ** min(self.attempt, 32)))
        self.attempt += 1
        return self._rng.uniform(self.min_s, cap)

    def reset(self) -> None:
        self.attempt = 0


@dataclass(frozen=True)
class Link:
    """The membership and the shared parts every link thread works with."""

    config: Config
    state: AgentState
    outbox: Outbox
    status: LinkStatus
    gate: Gate
    stop: threading.Event
    endpoints: Endpoints


class LinkThread(threading.Thread):
    """A daemon thread of the link, with its own backoff."""

    def __init__(self, name: str, link: Link):
        super().__init__(name=name, daemon=True)
        self.config, self.state, self.outbox = link.config, link.state, link.outbox
        self.status, self.gate, self.stop, self.endpoints = link.status, link.gate, link.stop, link.endpoints
        self.backoff = Backoff(link.config.reconnect_min_sec, link.config.reconnect_max_sec)
