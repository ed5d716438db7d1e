"""Retention of the Ray log directory, with real files and the real reader: a removed
container's directory goes once its lines are shipped, or after the retention bound with
its unshipped lines reported lost; a container over its cap loses its oldest sessions."""

from __future__ import annotations

import threading
import time

from faden_agent.config import load_config
from faden_agent.workers.logs.backlog import Backlog
from faden_agent.workers.logs.labels import LabelMaker
from faden_agent.workers.logs.positions import Positions
from faden_agent.workers.logs.sources import Shared
from faden_agent.workers.logs.sources.managed import ManagedNames
from faden_agent.workers.logs.sources.ray import retention
from faden_agent.workers.logs.sources.ray import source as files
from faden_agent.workers.logs.sources.ray.source import RaySource
from faden_agent.workers.threads import start_daemon
from tests.support.agentproc import wait_for
from tests.support.raylogs import Collector, serve_dir


class Holder(Collector):
    """Takes entries like a shipper whose Loki never accepts: no position moves."""

    def run(self) -> None:
        while True:
            self.lines.extend(self.backlog.take(100, 10**6, 0.05, 0.2))


def start(tmp_path, live: set[str], collector=Collector, **settings):
    config = load_config(
        {},
        agent_id="a",
        advertise_host="h",
        state_path=tmp_path / "state" / "s.json",
        ray_log_dir=tmp_path / "ray",
        **settings,
    )
    backlog, positions, stop = Backlog(max_lines=1000), Positions(config.state_dir), threading.Event()
    managed = ManagedNames()
    managed.listed({name: name for name in live})  # id -> name: the names stand for the ids here
    source = RaySource(Shared(config, backlog, positions, LabelMaker(config), stop, start_daemon), managed)
    source.start()
    return source, collector(backlog, positions), stop


def stopped(source, stop) -> None:
    stop.set()
    source.stop()
    source.thread.join(5)


def lines(n: int, tag: str) -> str:
    return "".join(f"INFO 2024-05-01 10:00:00,000 {tag} {i}\n" for i in range(n))


def fast(monkeypatch, reports: list) -> None:
    monkeypatch.setattr(files, "RESCAN_S", 0.5)
    monkeypatch.setattr(retention, "ORPHAN_GRACE_S", 0.5)
    monkeypatch.setattr(retention, "report_event", lambda config, data, record_id=None: reports.append(data) or True)


def test_a_removed_containers_directory_goes_once_shipped_and_a_live_one_stays(tmp_path, monkeypatch):
    reports: list = []
    fast(monkeypatch, reports)
    (serve_dir(tmp_path / "ray", "ray-live") / "replica.log").write_text(lines(5, "live"))
    (serve_dir(tmp_path / "ray", "ray-gone") / "replica.log").write_text(lines(5, "gone"))
    source, collector, stop = start(tmp_path, {"ray-live"})
    try:
        collector.wait(10)
        wait_for(lambda: not (tmp_path / "ray" / "ray-gone").exists(), 10, what="the removed one's directory gone")
        assert (tmp_path / "ray" / "ray-live").exists()
        assert sorted(e.line.split()[-2] for e in collector.lines).count("gone") == 5  # shipped first
        assert reports == []  # nothing lost
        assert source.retention.status()["removed_containers"] == 1
        assert not [k for k in collector.positions.keys("file:") if "gone" in str(collector.positions.get(k))]
    finally:
        stopped(source, stop)


def test_after_the_retention_bound_unshipped_lines_are_deleted_and_reported(tmp_path, monkeypatch):
    reports: list = []
    fast(monkeypatch, reports)
    (serve_dir(tmp_path / "ray", "ray-gone") / "replica.log").write_text(lines(7, "gone"))
    started = time.monotonic()
    source, collector, stop = start(tmp_path, set(), Holder, ray_log_retention_sec=6)
    try:
        collector.wait(7)
        time.sleep(max(0.0, started + 3 - time.monotonic()))  # past the grace, within the bound
        assert (tmp_path / "ray" / "ray-gone").exists()  # not accepted: kept within the bound
        wait_for(lambda: not (tmp_path / "ray" / "ray-gone").exists(), 10, what="deleted after the bound")
        assert [{k: r[k] for k in ("type", "source", "count", "at_least", "reason")} for r in reports] == [
            {
                "type": "logs.lines_lost",
                "source": "ray:ray-gone",
                "count": 7,
                "at_least": False,
                "reason": "unshipped_at_retention",
            }
        ]
    finally:
        stopped(source, stop)


def test_a_container_over_its_cap_loses_its_oldest_sessions_never_the_newest(tmp_path, monkeypatch):
    reports: list = []
    fast(monkeypatch, reports)
    container = tmp_path / "ray" / "ray-big"
    for day in (1, 2, 3):
        serve = container / f"session_2024-05-0{day}_00-00-00_1" / "logs" / "serve"
        serve.mkdir(parents=True)
        (serve / "replica.log").write_text(lines(20_000, f"day{day}"))  # about 0.9 MiB each
    source, collector, stop = start(tmp_path, {"ray-big"}, ray_log_max_bytes=1_500_000)
    try:
        wait_for(lambda: source.retention.status()["removed_sessions"] == 2, 10, what="two sessions removed")
        left = sorted(p.name for p in container.iterdir())
        assert left == ["session_2024-05-03_00-00-00_1"]
        assert {r["reason"] for r in reports} == {"ray_log_cap"}
        lost = sum(r["count"] for r in reports)
        shipped = sum(1 for e in collector.lines if " day1 " in e.line or " day2 " in e.line)
        assert 0 < lost <= 40_000 and lost + shipped >= 40_000  # every line of the two: shipped or counted
    finally:
        stopped(source, stop)
