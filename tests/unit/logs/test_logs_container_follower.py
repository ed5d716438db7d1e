"""A container's log follower on a recorded log: lines sharing one nanosecond stamp are all
shipped, and a second follow from where the first stopped reads none again; the source's stop
ends a follow blocked on a quiet container's log."""

from __future__ import annotations

import threading
import time

from faden_agent.config import load_config
from faden_agent.workers.logs.backlog import Backlog
from faden_agent.workers.logs.labels import LabelMaker
from faden_agent.workers.logs.positions import Positions
from faden_agent.workers.logs.sources import Shared
from faden_agent.workers.logs.sources.managed import ManagedNames
from faden_agent.workers.logs.stamps import parse_rfc3339_ns
from faden_agent.workers.threads import start_daemon


class RecordedLog:
    """A stand-in for an engine Container (engine/containers.py) whose log is a fixed list of
    chunks: Docker stamps lines itself, so identical nanosecond stamps cannot be provoked on a
    real engine."""

    name, labels = "recorded", {}
    attrs = {"State": {"Status": "exited"}}  # its run ended: the read past the follow reads it again

    def __init__(self, chunks: list[bytes]):
        self.chunks = chunks

    def reload(self) -> None:
        pass

    def logs(self, **_: object):
        return iter(self.chunks)


class QuietLog:
    """A followed log with nothing to say: its read blocks until close() (a LogStream's)."""

    def __init__(self) -> None:
        self.closed = threading.Event()

    def __iter__(self):
        self.closed.wait(30)
        yield from ()

    def close(self) -> None:
        self.closed.set()


class QuietContainer(RecordedLog):
    attrs = {"State": {"Status": "running", "Running": True}}

    def __init__(self) -> None:
        super().__init__([])
        self.log = QuietLog()

    def logs(self, **_: object):
        return self.log


def make_source(tmp_path, stop: threading.Event | None = None):
    from faden_agent.workers.logs.sources.containers.source import ContainersSource

    config = load_config({"FADEN_NODE_AGENT_STATE_PATH": str(tmp_path / "state.json")})
    backlog = Backlog()
    source = ContainersSource(
        Shared(config, backlog, Positions(tmp_path), LabelMaker(config), stop or threading.Event(), start_daemon),
        ManagedNames(),
    )
    return source, backlog


def test_container_lines_sharing_a_nanosecond_stamp_are_all_shipped(tmp_path):
    from faden_agent.workers.logs.sources.containers.source import ContainerFollower

    source, backlog = make_source(tmp_path)
    stamp = b"2026-11-29T23:00:00.000000005Z "
    follower = ContainerFollower(
        source,
        RecordedLog([stamp + b"first\n" + stamp + b"second\n", b"2026-11-29T23:00:00.000000009Z third\n"]),
        "stdout",
        "c:x",
    )
    source.read_upto["c:x"] = parse_rfc3339_ns(b"2026-11-29T23:00:00.000000001Z")  # resume point before them
    assert follower.read_until_stopped()
    assert [e.line for e in backlog.take(10, 1 << 20, 0, 0.01)] == ["first", "second", "third"]
    # a second follow from where the first stopped does not read them again
    follower.container = RecordedLog(
        [stamp + b"first\n" + stamp + b"second\n", b"2026-11-29T23:00:00.000000009Z third\n"]
    )
    assert follower.read_until_stopped()
    assert backlog.take(10, 1 << 20, 0, 0.01) == []


def test_the_sources_stop_closes_a_follow_blocked_on_a_quiet_log(tmp_path):
    from faden_agent.workers.logs.sources.containers.source import ContainerFollower

    stop = threading.Event()
    source, _ = make_source(tmp_path, stop)
    container = QuietContainer()
    source.followers["c:x"] = follower = ContainerFollower(source, container, "stdout", "c:x")
    follower.start()
    time.sleep(0.3)  # blocked in its read
    assert follower.is_alive() and not container.log.closed.is_set()
    stop.set()
    source.stop()
    follower.thread.join(2)
    assert container.log.closed.is_set() and not follower.is_alive()
