"""The reference backend's shared state: what every request's action reaches as req.backend
(the store, the fault switches, the settings, the streams' wake-up and the request log)."""

from __future__ import annotations

import collections
import threading
from pathlib import Path
from typing import Any

from faden_agent.devbackend.faults import Faults
from faden_agent.devbackend.store import Store

DEFAULT_KEEPALIVE_S = 15.0
REQUEST_LOG_SIZE = 5000


class Backend:
    def __init__(
        self,
        data_dir: Path,
        admin_token: str,
        *,
        downloads: Path | None = None,
        loki_url: str | None = None,
        loki_tenant: str | None = None,
        keepalive_sec: float = DEFAULT_KEEPALIVE_S,
    ):
        if not admin_token or not admin_token.strip():
            raise ValueError("the admin token is empty: it would open the admin API to anyone")
        self.store = Store(data_dir)
        self.admin_token = admin_token
        self.downloads = downloads
        self.loki_url = loki_url.rstrip("/") if loki_url else None
        self.loki_tenant = loki_tenant
        self.keepalive_sec = keepalive_sec
        self.faults = Faults()
        self.new_commands = threading.Condition()
        self.cluster_generation = 0  # bumped on every cluster change: streams send `peers` again
        self.fanouts: dict[str, Any] = {}  # fan-out id -> devbackend.fanout.Fanout
        self.probes: dict[str, Any] = {}  # probe round id -> devbackend.probes.ProbeRound
        self.relays: dict[str, Any] = {}  # relay id -> devbackend.relay.Relay
        # What `hello` says nodes should run (admin: expectations); None: the served build, and
        # every capability of this project's agent.
        self.expectations: dict[str, Any] = {"version": None, "capabilities": None}
        self.requests: collections.deque[dict[str, Any]] = collections.deque(maxlen=REQUEST_LOG_SIZE)
        self.requests_lock = threading.Lock()

    def log_request(self, at: float, method: str, path: str, status: int) -> None:
        with self.requests_lock:
            self.requests.append({"at": at, "method": method, "path": path, "status": status})

    def notify_streams(self) -> None:
        with self.new_commands:
            self.new_commands.notify_all()
