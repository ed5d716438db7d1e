"""The log shipper inside the real agent (`faden-agent run`), with real journal files made by
systemd-journal-remote, a Loki-compatible receiver over HTTP, real signals and real files."""

from __future__ import annotations

import logging
import logging.handlers
import os
import signal
import time
import uuid
from collections import defaultdict
from pathlib import Path

import psutil
import pytest

from tests.agentproc import AgentProcess, agent_env, wait_for
from tests.journalfiles import JournalWriter
from tests.lokireceiver import LokiReceiver

# Documented in docs/logs.md: the log worker's RSS stays under this while Loki is down,
# whatever the size of the waiting backlog in the journal.
RSS_BOUND_BYTES = 100 * 1024 * 1024


@pytest.fixture
def loki():
    with LokiReceiver(version="3") as receiver:
        yield receiver


def start_agent(tmp_path: Path, loki: LokiReceiver, journal: Path, **overrides) -> AgentProcess:
    env = agent_env(tmp_path, loki_url=loki.url, journal_directory=journal, agent_id="logs-node",
                    advertise_host="10.9.8.7", log_flush_interval_sec=0.2, reconnect_min_sec=0.1,
                    reconnect_max_sec=0.5, **overrides)
    return AgentProcess(env, tmp_path / "agent.log")  # `with` starts it


def system_lines(entries, agent_id: str = "logs-node"):
    """The system-log entries, by timestamp (a push groups lines by stream, not by time)."""
    return sorted((e for e in entries if e.labels.get("container") == f"node-{agent_id}"), key=lambda e: int(e.ts))


def logs_pid(agent: AgentProcess) -> int:
    return wait_for(lambda: (agent.workers().get("logs") or {}).get("pid"), 10, what="logs worker pid")


def assert_only_exact_duplicates(entries) -> None:
    seen = defaultdict(set)
    for e in entries:
        seen[e.line].add((e.stream, e.ts))
    inexact = {line: keys for line, keys in seen.items() if len(keys) > 1}
    assert not inexact, f"{len(inexact)} lines arrived with different streams or timestamps, e.g. {next(iter(inexact.items()))}"


def test_journal_lines_arrive_with_exact_labels_and_timestamps_and_appends_follow(tmp_path, loki):
    journal = JournalWriter(tmp_path / "journal")
    first = [journal.entry("disk ok", 6, _SYSTEMD_UNIT="smartd.service", _PID="412", SYSLOG_IDENTIFIER="smartd"),
             journal.entry("fan failed", 2, _SYSTEMD_UNIT="ipmi.service", _PID="77"),
             journal.entry(b"raw \xff bytes", None),  # binary MESSAGE, no PRIORITY
             journal.entry(None, 4)]  # no MESSAGE at all
    journal.append(first)
    with start_agent(tmp_path, loki, journal.directory):
        got = loki.wait_for(lambda e: len(system_lines(e)) >= 4 and system_lines(e), 20)
        base = {"job": "node-agent", "host": "10.9.8.7", "agent_id": "logs-node", "container": "node-logs-node"}
        assert [(e.labels, e.ts, e.line) for e in got] == [
            ({**base, "level": "info"}, first[0]["__REALTIME_TIMESTAMP"] + "000", "disk ok"),
            ({**base, "level": "crit"}, first[1]["__REALTIME_TIMESTAMP"] + "000", "fan failed"),
            ({**base, "level": "info"}, first[2]["__REALTIME_TIMESTAMP"] + "000", "raw \ufffd bytes"),
            ({**base, "level": "warning"}, first[3]["__REALTIME_TIMESTAMP"] + "000", ""),
        ]
        assert got[0].metadata == {"unit": "smartd.service", "pid": "412", "syslog_identifier": "smartd",
                                   "boot_id": journal.boot_id}
        # Appending to the followed journal file delivers the new lines.
        journal.append(journal.lines([f"appended {i}" for i in range(50)], priority=3))
        got = loki.wait_for(lambda e: len(system_lines(e)) >= 54 and system_lines(e), 20)
        assert [e.line for e in got[4:]] == [f"appended {i}" for i in range(50)]
        assert {e.labels["level"] for e in got[4:]} == {"error"}
        assert len(got) == 54


def test_kill_9_of_the_log_worker_while_shipping_50000_lines_loses_nothing(tmp_path, loki):
    total = 50_000
    journal = JournalWriter(tmp_path / "journal")
    journal.append(journal.lines([f"line {i:05d}" for i in range(total)], _SYSTEMD_UNIT="load.service"))
    loki.delay_s = 0.01  # a Loki that takes a moment: the kill lands mid-way
    with start_agent(tmp_path, loki, journal.directory, log_batch_size=200) as agent:
        victim = logs_pid(agent)
        loki.wait_for(lambda e: len(e) >= 5_000, 60)
        os.kill(victim, signal.SIGKILL)
        at_kill = len(system_lines(loki.entries()))
        assert at_kill < total, "the shipping finished before the kill; the test proves nothing"
        wait_for(lambda: logs_pid(agent) != victim, 20, what="the supervisor to restart the log worker")
        loki.wait_for(lambda e: len({x.line for x in system_lines(e)}) >= total, 120)
        entries = system_lines(loki.entries())
        assert {e.line for e in entries} == {f"line {i:05d}" for i in range(total)}
        assert_only_exact_duplicates(entries)  # Loki drops exact duplicates


def test_loki_down_then_throttling_then_up_loses_nothing_and_memory_stays_bounded(tmp_path, loki):
    total = 40_000
    journal = JournalWriter(tmp_path / "journal")
    journal.append(journal.lines([f"outage {i:05d} " + "x" * 200 for i in range(total)]))
    loki.down()
    with start_agent(tmp_path, loki, journal.directory, log_batch_size=500) as agent:
        worker = psutil.Process(logs_pid(agent))
        peak = 0
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:  # Loki down: the reader must stop, not hoard
            peak = max(peak, worker.memory_info().rss)
            time.sleep(0.1)
        status = agent.workers()["logs"]["status"]
        assert status["backlog_full_waits"] >= 1
        assert status["sources"]["journal"]["lines_read"] < total / 2  # it stopped reading
        loki.up()
        loki.set_mode("throttle", retry_after=0.5)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            peak = max(peak, worker.memory_info().rss)
            time.sleep(0.1)
        loki.set_mode("ok")
        while len({e.line for e in system_lines(loki.entries())}) < total:
            peak = max(peak, worker.memory_info().rss)
            assert worker.is_running(), "the log worker died"
            time.sleep(0.1)
        entries = system_lines(loki.entries())
        assert {e.line[:12] for e in entries} == {f"outage {i:05d}"[:12] for i in range(total)}
        assert loki.statuses.get(429, 0) >= 1
        assert_only_exact_duplicates(entries)
        print(f"peak RSS of the log worker: {peak / 2**20:.1f} MiB")
        assert peak < RSS_BOUND_BYTES


def test_ray_serve_file_rotated_by_rename_while_shipping_loses_no_line(tmp_path, loki):
    serve = tmp_path / "ray" / "ray-head-7" / "session_2024-06-01_10-00-00_1" / "logs" / "serve"
    serve.mkdir(parents=True)
    journal = JournalWriter(tmp_path / "journal")
    journal.append(journal.lines(["boot"]))
    with start_agent(tmp_path, loki, journal.directory):
        logger = logging.getLogger("test-agent-ray-rotation")
        logger.propagate = False
        handler = logging.handlers.RotatingFileHandler(serve / "proxy_10.0.0.1.log", maxBytes=8_000, backupCount=100)
        handler.setFormatter(logging.Formatter("%(levelname)s %(asctime)s proxy 10.0.0.1 -- %(message)s"))
        logger.addHandler(handler)
        try:
            for i in range(2000):
                logger.warning("GET /v1/models %04d 200", i)
                if i % 50 == 0:
                    time.sleep(0.05)
        finally:
            handler.close()
            logger.removeHandler(handler)
        got = loki.wait_for(lambda e: len([x for x in e if x.labels.get("source") == "ray-serve"]) >= 2000
                            and [x for x in e if x.labels.get("source") == "ray-serve"], 30)
        assert [int(e.line.split()[-2]) for e in got] == list(range(2000))
        assert got[0].labels == {"job": "node-agent", "host": "10.9.8.7", "agent_id": "logs-node",
                                 "container": "ray-head-7", "source": "ray-serve", "file": "proxy"}


@pytest.mark.docker
def test_logs_of_a_managed_container_that_prints_restarts_and_prints_again(tmp_path, loki, docker_client):
    from faden_agent import protocol
    from faden_agent.workers.logs.sources.containers import parse_rfc3339_ns
    from tests.conftest import TEST_IMAGE

    name = f"faden-logs-test-{uuid.uuid4().hex[:8]}"
    container = docker_client.containers.create(
        TEST_IMAGE, ["sh", "-c", "echo out-one; echo err-one >&2; sleep 0.2; echo out-two"], name=name,
        labels={protocol.LABEL_MANAGED: "true", protocol.LABEL_AGENT_ID: "logs-node",
                protocol.LABEL_CLUSTER: "cluster-a", protocol.LABEL_WORKLOAD: "serve-1"})
    journal = JournalWriter(tmp_path / "journal")
    journal.append(journal.lines(["boot"]))

    def mine(entries):
        return sorted((e for e in entries if e.labels.get("container") == name), key=lambda e: int(e.ts))

    try:
        with start_agent(tmp_path, loki, journal.directory):
            container.start()
            assert container.wait(timeout=30)["StatusCode"] == 0
            loki.wait_for(lambda e: len(mine(e)) >= 3, 30)
            container.start()  # the same container runs again and prints again
            assert container.wait(timeout=30)["StatusCode"] == 0
            got = loki.wait_for(lambda e: len(mine(e)) >= 6 and mine(e), 30)
            time.sleep(1)  # nothing more may come (no re-reads of the first run)
            got = mine(loki.entries())
        stdout = [e for e in got if e.labels["stream"] == "stdout"]
        assert [e.line for e in stdout] == ["out-one", "out-two", "out-one", "out-two"]
        assert [e.line for e in got if e.labels["stream"] == "stderr"] == ["err-one", "err-one"]
        assert stdout[0].labels == {"job": "node-agent", "host": "10.9.8.7", "agent_id": "logs-node",
                                    "container": name, "cluster": "cluster-a", "workload": "serve-1",
                                    "source": "container", "stream": "stdout"}
        docker_stamps = [parse_rfc3339_ns(line.split(b" ", 1)[0]) for line in
                         container.logs(stdout=True, stderr=False, timestamps=True).splitlines()]
        assert [int(e.ts) for e in stdout] == docker_stamps  # Docker's own timestamps
    finally:
        container.remove(force=True)


def test_a_stopped_journalctl_never_delays_the_log_workers_heartbeat(tmp_path, loki):
    journal = JournalWriter(tmp_path / "journal")
    journal.append(journal.lines(["before the stop"]))
    with start_agent(tmp_path, loki, journal.directory) as agent:
        loki.wait_for(lambda e: system_lines(e), 20)
        worker = psutil.Process(logs_pid(agent))
        reader = wait_for(lambda: [c for c in worker.children() if c.name() == "journalctl"], 10, what="journalctl")[0]
        reader.send_signal(signal.SIGSTOP)  # a hung journald reader
        try:
            journal.append(journal.lines(["while stopped"]))
            time.sleep(3)  # longer than the hang timeout (2 s) of these tests
            row = agent.workers()["logs"]
            assert row["pid"] == worker.pid and row["state"] == "RUNNING" and row["heartbeat_age_s"] < 1.5
        finally:
            reader.send_signal(signal.SIGCONT)
        loki.wait_for(lambda e: [x for x in system_lines(e) if x.line == "while stopped"], 20)


def test_lines_loki_refuses_are_not_resent_and_are_reported_as_an_event(tmp_path):
    from faden_agent.outbox import Outbox

    with LokiReceiver(reject_older_than_s=60, version="3") as picky:
        journal = JournalWriter(tmp_path / "journal")
        ten_minutes_ago = time.time_ns() // 1000 - 600 * 10**6
        journal.append([journal.entry(f"stale {i}", 6, realtime_us=ten_minutes_ago + i) for i in range(3)]
                       + journal.lines(["fresh"]))
        with start_agent(tmp_path, picky, journal.directory):
            picky.wait_for(lambda e: [x for x in e if x.line == "fresh"], 20)
            outbox = Outbox(tmp_path / "state")
            event = wait_for(lambda: next((r for r in outbox.pending(100) if r["kind"] == "event"
                                           and r["data"].get("type") == "logs.lines_lost"), None),
                             10, what="a logs.lines_lost event in the outbox")
            # The batch of 4 (more if a managed container of another test wrote meanwhile).
            assert event["data"]["rejected"] >= 4 and event["data"]["too_large"] == 0
            time.sleep(1)
            assert picky.statuses[400] == 1  # the 400 batch was never sent again


def test_first_start_ships_the_last_hour_not_the_whole_history(tmp_path, loki):
    journal = JournalWriter(tmp_path / "journal")
    now_us = time.time_ns() // 1000
    journal.append([journal.entry("two hours ago", 6, realtime_us=now_us - 7200 * 10**6),
                    journal.entry("ten minutes ago", 6, realtime_us=now_us - 600 * 10**6),
                    journal.entry("just now", 6, realtime_us=now_us)])
    with start_agent(tmp_path, loki, journal.directory):
        loki.wait_for(lambda e: [x for x in e if x.line == "just now"], 20)
        time.sleep(0.5)
        assert [e.line for e in system_lines(loki.entries())] == ["ten minutes ago", "just now"]


@pytest.mark.docker
def test_a_recreated_managed_container_is_read_from_its_first_line(tmp_path, loki, docker_client):
    from faden_agent import protocol
    from tests.conftest import TEST_IMAGE

    name = f"faden-logs-test-{uuid.uuid4().hex[:8]}"
    journal = JournalWriter(tmp_path / "journal")
    journal.append(journal.lines(["boot"]))

    def run(generation: int) -> None:
        container = docker_client.containers.run(
            TEST_IMAGE, ["sh", "-c", f"echo generation-{generation}"], name=name, detach=True,
            labels={protocol.LABEL_MANAGED: "true", protocol.LABEL_AGENT_ID: "logs-node"})
        try:
            assert container.wait(timeout=30)["StatusCode"] == 0
            loki.wait_for(lambda e: [x for x in e if x.line == f"generation-{generation}"], 30)
        finally:
            container.remove(force=True)

    with start_agent(tmp_path, loki, journal.directory):
        run(1)
        run(2)  # same name, new container id
    lines = [e.line for e in loki.entries() if e.labels.get("container") == name]
    assert lines == ["generation-1", "generation-2"]
