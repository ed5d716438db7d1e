"""Idle log readers wait in the kernel, not in timed polls: the container source
blocks on its inbox until a Docker event, a drain request, the stream's end or a stop (it
polled every 0.2 s: 5 wakeups a second on every machine)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from faden_agent.config import load_config
from faden_agent.workers.logs.backlog import Backlog
from faden_agent.workers.logs.labels import LabelMaker
from faden_agent.workers.logs.positions import Positions
from faden_agent.workers.logs.sources import Shared
from faden_agent.workers.logs.sources.containers.source import ContainersSource
from faden_agent.workers.logs.sources.managed import ManagedNames
from faden_agent.workers.threads import start_daemon


def switches(thread: threading.Thread) -> int:
    text = Path(f"/proc/self/task/{thread.native_id}/status").read_text()
    return int(next(line for line in text.splitlines() if line.startswith("voluntary_ctxt_switches")).split()[1])


# Serial: it counts the source's wake-ups on the shared engine, and the containers of tests
# running beside it would be Docker events that wake it (39 switches in a parallel CI run).
@pytest.mark.serial
def test_the_container_source_sleeps_until_something_happens_and_stops_at_once(tmp_path, docker_client):
    config = load_config({}, agent_id="a", advertise_host="h", state_path=tmp_path / "state" / "s.json")
    stop = threading.Event()
    source = ContainersSource(
        Shared(config, Backlog(), Positions(config.state_dir), LabelMaker(config), stop, start_daemon), ManagedNames()
    )
    source.start()
    try:
        time.sleep(3.0)  # the listing at start is done
        before = switches(source.thread)
        time.sleep(4.0)
        assert switches(source.thread) - before <= 3  # polling every 0.2 s: 20
        assert source.thread.is_alive() and not source.last_error
    finally:
        stop.set()
        source.stop()
        source.thread.join(5)
    assert not source.thread.is_alive()  # woken by stop(), not by a timeout
