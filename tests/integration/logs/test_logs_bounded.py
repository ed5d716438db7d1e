"""Bounded readers inside the real agent: a journal entry with a 32 MiB binary MESSAGE and a
managed container printing 100 MiB without a newline. The log worker's peak RSS stays under
RSS_BOUND_BYTES (docs/logs.md) and the lines after the huge one still arrive."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.support.journalfiles import JournalWriter
from tests.support.logsagent import RSS_BOUND_BYTES, PeakRss, logs_pid, start_agent, system_lines, text
from tests.support.lokireceiver import LokiReceiver


@pytest.fixture
def loki():
    with LokiReceiver() as receiver:
        yield receiver


def test_a_journal_entry_with_a_32_mib_binary_message_keeps_the_worker_small(tmp_path, loki):
    journal = JournalWriter(tmp_path / "journal")
    journal.append(journal.lines(["before"]))
    with start_agent(tmp_path, loki, journal.directory) as agent:
        loki.wait_for(lambda e: [x for x in system_lines(e) if text(x) == "before"], 20)
        rss = PeakRss(logs_pid(agent))
        huge = bytes(range(256)) * (32 * 1024 * 1024 // 256)  # binary: journalctl writes an array of numbers
        journal.append([journal.entry(huge, 3)] + journal.lines(["after"]))
        got = loki.wait_for(lambda e: [x for x in system_lines(e) if text(x) == "after"] and system_lines(e), 120)
        peak = rss.stop()
        # a report sent after "after" reached Loki: the cut, read before it, is counted there
        status = agent.row_sent_after("logs", time.monotonic())["status"]["sources"]["journal"]
    print(f"log worker peak RSS, 32 MiB binary journal MESSAGE: {peak / 2**20:.1f} MiB")
    cut = [e for e in got if "journal entry of" in e.line]
    assert len(cut) == 1 and status["entries_cut"] == 1
    assert cut[0].labels["level"] == "error"
    assert cut[0].line.startswith("\x00\x01\x02") and len(cut[0].line.encode()) < 70 * 1024
    assert text(got[-1]) == "after"
    assert peak < RSS_BOUND_BYTES


def managed_container(docker_client, script: str):
    """A container this agent's log shipper follows (managed, its agent id), not started yet."""
    from faden_agent import protocol
    from tests.conftest import TEST_IMAGE

    return docker_client.containers.create(
        TEST_IMAGE,
        ["sh", "-c", script],
        name=f"faden-logs-test-{uuid.uuid4().hex[:8]}",
        labels={protocol.LABEL_MANAGED: "true", protocol.LABEL_AGENT_ID: "logs-node"},
    )


def ship_container_output(tmp_path, loki, docker_client, script: str, last: str, timeout_s: float):
    """Runs a managed container printing `script`'s output once the agent follows it, waits
    until its `last` line arrived; (its entries, the container source's status, the log
    worker's peak RSS)."""
    journal = JournalWriter(tmp_path / "journal")
    journal.append(journal.lines(["boot"]))
    container = managed_container(docker_client, script)
    name = container.name
    try:
        with start_agent(tmp_path, loki, journal.directory) as agent:
            rss = PeakRss(logs_pid(agent))
            time.sleep(2.5)  # the follower is there before the output (discovery)
            container.start()
            mine = lambda e: [x for x in e if x.labels.get("container") == name]  # noqa: E731
            got = loki.wait_for(lambda e: [x for x in mine(e) if text(x) == last] and mine(e), timeout_s)
            peak = rss.stop()
            return got, agent.row_sent_after("logs", time.monotonic())["status"]["sources"]["containers"], peak
    finally:
        container.remove(force=True)


@pytest.mark.docker
def test_a_container_printing_100_mib_without_a_newline_keeps_the_worker_small(tmp_path, loki, docker_client):
    script = "head -c 104857600 /dev/zero | tr '\\0' x; echo; echo after-the-flood"
    got, status, peak = ship_container_output(tmp_path, loki, docker_client, script, "after-the-flood", 180)
    print(f"log worker peak RSS, 100 MiB container line without newline: {peak / 2**20:.1f} MiB")
    assert [e.line[:5] for e in got] == ["xxxxx", "after"]
    assert "line cut at 65536 bytes" in got[0].line and len(got[0].line.encode()) < 70 * 1024
    assert status["lines_cut"] >= 1  # this one (other tests' containers on the shared engine may add)
    assert peak < RSS_BOUND_BYTES


def test_a_journalctl_without_output_fields_still_ships(tmp_path, loki):
    """systemd < 236 has no --output-fields: the reader drops the option and goes on. (An old
    journalctl cannot be installed here: a wrapper refuses the option the way it does.)"""
    import os
    import shutil

    wrapper_dir = tmp_path / "bin"
    wrapper_dir.mkdir()
    wrapper = wrapper_dir / "journalctl"
    wrapper.write_text(
        '#!/bin/sh\nfor a in "$@"; do case "$a" in --output-fields=*) '
        "echo \"journalctl: unrecognized option '$a'\" >&2; exit 1;; esac; done\n"
        f'exec {shutil.which("journalctl")} "$@"\n'
    )
    wrapper.chmod(0o755)
    journal = JournalWriter(tmp_path / "journal")
    journal.append(journal.lines(["from an old systemd"]))
    agent = start_agent(tmp_path, loki, journal.directory)
    agent.env["PATH"] = f"{wrapper_dir}{os.pathsep}{agent.env['PATH']}"
    with agent:
        loki.wait_for(lambda e: [x for x in system_lines(e) if text(x) == "from an old systemd"], 30)
        assert "no --output-fields" in agent.log_text()


@pytest.mark.docker
def test_a_line_docker_cut_into_partial_messages_arrives_whole(tmp_path, loki, docker_client):
    """Docker's json-file driver cuts a line into 16 KiB partial messages, each with its own
    timestamp prefix when read with timestamps: none of those prefixes may land in the line."""
    script = "head -c 40000 /dev/zero | tr '\\0' y; echo; echo after-the-long-line"
    got, _, _ = ship_container_output(tmp_path, loki, docker_client, script, "after-the-long-line", 60)
    # Whole and uncut, this container's own entries (the worker's lines_cut counts every
    # managed container on the shared engine: another test's endless line is cut there).
    assert [e.line for e in got] == ["y" * 40000, "after-the-long-line"]
