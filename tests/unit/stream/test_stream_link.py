"""Backoff, the request gate and the status file of the stream worker's link."""

from __future__ import annotations

import random
import stat
import threading
import time

import orjson

from faden_agent.backend.client import MaintenanceHold
from faden_agent.common.backoff import Backoff
from faden_agent.node.linkstatus import LinkStatus
from faden_agent.protocol.link import LinkState
from faden_agent.workers.stream.link import Gate


def test_backoff_full_jitter_grows_to_max_and_stays_in_bounds():
    backoff = Backoff(0.5, 8.0, rng=random.Random(1))
    delays = [backoff.next_delay() for _ in range(200)]
    assert all(0.5 <= d <= 8.0 for d in delays)
    assert max(delays[:1]) <= 0.5 + 1e-9  # attempt 0: exactly the minimum
    assert max(delays[50:]) > 6.0  # later attempts reach toward the cap
    assert len({round(d, 3) for d in delays[50:]}) > 100  # jitter, not a fixed ladder
    backoff.reset()
    assert backoff.next_delay() == 0.5


def test_gate_holds_every_waiter_and_stop_releases(tmp_path):
    stop = threading.Event()
    gate = Gate(stop, MaintenanceHold(tmp_path))
    gate.hold(0.3)
    gate.hold(0.1)  # a shorter hold never shortens a longer one
    started = time.monotonic()
    assert gate.wait()
    assert time.monotonic() - started >= 0.29
    gate.hold(30)
    threading.Timer(0.1, stop.set).start()
    assert gate.wait() is False


def test_status_file_is_private_and_tracks_state(tmp_path):
    path = tmp_path / "state" / "status.json"
    status = LinkStatus("http://b", path)
    status.set_connection(LinkState.BACKOFF, "connection refused")
    data = orjson.loads(path.read_bytes())
    assert data["state"] == "backoff" and data["last_error"] == "connection refused"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    status.set_connection(LinkState.CONNECTED)
    status.contact()
    data = orjson.loads(path.read_bytes())
    assert data["state"] == "connected" and data["last_error"] == "connection refused"
