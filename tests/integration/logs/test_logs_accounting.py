"""Every line accounted for: per source lines_read = lines_shipped + lines_refused +
lines_lost, a loss reported as a logs.lines_lost event with its count and reason.

The journal case is real journald files: the lines the agent had not read yet sit in an
archived file (journald's rotation, same seqnum ID, numbering continued in the active
file), which `journalctl --vacuum-files=1` then deletes, as journald's vacuum would."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import docker

from faden_agent.backend.outbox import Outbox
from tests.conftest import TEST_IMAGE
from tests.support.agentproc import AgentProcess, agent_env, wait_for
from tests.support.executorproc import prefix  # noqa: F401 - fixture
from tests.support.journalfiles import JournalWriter
from tests.support.lokireceiver import LokiReceiver
from tests.support.privateengine import PrivateEngine
from tests.support.smallengine import small_engine

TAIL_ENTRY_SEQNUM = 160  # offset in a journal file's header (systemd's Header struct)
SEQNUM_ID = slice(64, 80)


def rotate_with(journal: JournalWriter, lines: list[str]) -> Path:
    """What journald's rotation leaves: `lines` in an archived file of the same lineage
    (system@<seqnum id>-<head seqnum>-<head realtime>.journal, holding the older entries
    too), the active file numbering on after them. Returns the archive's path."""
    scratch = journal.directory.parent / "rotation"
    archive = JournalWriter(scratch, "archive.journal")
    archive.boot_id, archive.monotonic_us = journal.boot_id, journal.monotonic_us
    archive.last_realtime_us = journal.last_realtime_us
    shutil.copy(journal.path, archive.path)
    archive.append(archive.lines(lines))
    header = bytearray(journal.path.read_bytes())
    seqnum_id = header[SEQNUM_ID].hex()
    (tail,) = struct.unpack_from("<Q", archive.path.read_bytes(), TAIL_ENTRY_SEQNUM)
    struct.pack_into("<Q", header, TAIL_ENTRY_SEQNUM, tail)  # the active file goes on after the archive
    journal.path.write_bytes(bytes(header))
    journal.monotonic_us, journal.last_realtime_us = archive.monotonic_us, archive.last_realtime_us
    archived = journal.directory / f"system@{seqnum_id}-{1:016x}-{0:016x}.journal"
    shutil.move(archive.path, archived)
    return archived


def run_agent(tmp_path: Path, loki: LokiReceiver, journal: JournalWriter, upto: str) -> dict:
    """Run the agent (same state each time) until the receiver holds `upto`; its journal account."""
    env = agent_env(
        tmp_path,
        loki_url=loki.url,
        journal_directory=journal.directory,
        agent_id="accounting",
        log_flush_interval_sec=0.2,
        docker_host="unix:///nonexistent/docker.sock",
    )
    with AgentProcess(env, tmp_path / "agent.log") as agent:
        loki.wait_for(lambda entries: any(e.line == upto for e in entries), 60)
        return settled_account(agent, "journal")


def settled_account(agent: AgentProcess, source: str) -> dict:
    """The source's status once every line it read is shipped or lost (`ps --json`)."""
    return wait_for(
        lambda: (
            (s := agent.workers()["logs"]["status"]["sources"][source])["lines_shipped"] + s["lines_lost"]
            == s["lines_read"]
            and s
        ),
        20,
        what=f"every {source} line read shipped or lost",
    )


def lost_events(tmp_path: Path) -> list[dict]:
    outbox = Outbox(tmp_path / "state")
    return [
        r["data"] for r in outbox.pending(1000) if r["kind"] == "event" and r["data"].get("type") == "logs.lines_lost"
    ]


def test_lines_vacuumed_before_they_were_read_are_counted_lost_with_their_reason(tmp_path):
    journal = JournalWriter(tmp_path / "journal", "system.journal")
    journal.append(journal.lines([f"line {i}" for i in range(10)]))
    with LokiReceiver(version="3") as loki:
        first = run_agent(tmp_path, loki, journal, "line 9")
        assert (first["lines_read"], first["lines_shipped"], first["lines_lost"]) == (10, 10, 0)
        archived = rotate_with(journal, [f"line {i}" for i in range(10, 25)])  # never read
        journal.append(journal.lines([f"line {i}" for i in range(25, 30)]))
        vacuum = subprocess.run(
            ["journalctl", f"--directory={journal.directory}", "--vacuum-files=1"], capture_output=True, text=True
        )
        assert not archived.exists(), vacuum.stderr
        second = run_agent(tmp_path, loki, journal, "line 29")
        shipped = [e.line for e in loki.entries()]
    assert shipped == [f"line {i}" for i in (*range(10), *range(25, 30))]
    assert (second["lines_read"], second["lines_shipped"], second["lines_refused"], second["lines_lost"]) == (
        20,
        5,
        0,
        15,
    )
    (event,) = lost_events(tmp_path)
    assert (event["source"], event["count"], event["at_least"], event["reason"]) == (
        "journal",
        15,
        False,
        "rotated_before_read",
    )


def test_a_rotation_read_in_time_reports_no_loss(tmp_path):
    journal = JournalWriter(tmp_path / "journal", "system.journal")
    journal.append(journal.lines([f"line {i}" for i in range(10)]))
    with LokiReceiver(version="3") as loki:
        run_agent(tmp_path, loki, journal, "line 9")
        rotate_with(journal, [f"line {i}" for i in range(10, 25)])  # archived, not vacuumed
        journal.append(journal.lines([f"line {i}" for i in range(25, 30)]))
        second = run_agent(tmp_path, loki, journal, "line 29")
        shipped = [e.line for e in loki.entries()]
    assert shipped == [f"line {i}" for i in range(30)]
    assert (second["lines_read"], second["lines_shipped"], second["lines_lost"]) == (20, 20, 0)
    assert lost_events(tmp_path) == []


FLOOD = 'i=0; while [ $i -lt 400 ]; do echo "flood $i ........................................"; i=$((i+1)); done'


def flooding_container(docker_client, name: str, agent_id: str, max_size: str):
    """A managed container that prints `first`, then 400 lines when /tmp/go appears."""
    from faden_agent import protocol

    script = f"echo first; while [ ! -e /tmp/go ]; do sleep 0.05; done; {FLOOD}; sleep 3600"
    return docker_client.containers.run(
        TEST_IMAGE,
        ["sh", "-c", script],
        name=name,
        labels={protocol.LABEL_MANAGED: "true", protocol.LABEL_AGENT_ID: agent_id},
        log_config={"type": "json-file", "config": {"max-size": max_size, "max-file": "2"}},
        detach=True,
    )


def container_account(tmp_path: Path, loki: LokiReceiver, engine: PrivateEngine, agent_id: str, name: str, until):
    journal = JournalWriter(tmp_path / "journal")
    if not journal.path.exists():
        journal.append(journal.lines(["boot"]))
    env = agent_env(
        tmp_path,
        loki_url=loki.url,
        journal_directory=journal.directory,
        agent_id=agent_id,
        log_flush_interval_sec=0.2,
        docker_host=engine.host,
    )
    with AgentProcess(env, tmp_path / "agent.log") as agent:
        loki.wait_for(lambda entries: until([e.line for e in entries if e.labels.get("container") == name]), 60)
        return settled_account(agent, "containers")


def run_rotation(tmp_path: Path, prefix: str, max_size: str) -> tuple[dict, list[str]]:
    agent_id = f"acct-{prefix}"
    name = f"{prefix}-rotating"
    # An engine of its own: an agent reads every managed container of its engine, and other
    # tests' containers on the shared one would add lines in flight to this account.
    with small_engine("200m", image=TEST_IMAGE) as engine, LokiReceiver(version="3") as loki:
        client = docker.DockerClient(base_url=engine.host)
        container = flooding_container(client, name, agent_id, max_size)
        container_account(tmp_path, loki, engine, agent_id, name, lambda lines: "first" in lines)
        container.exec_run(["touch", "/tmp/go"])  # the flood while no agent reads
        wait_for(lambda: b"flood 399" in container.logs(tail=1), 30, what="the flood written")
        second = container_account(tmp_path, loki, engine, agent_id, name, lambda lines: "flood 399" in " ".join(lines))
        shipped = [e.line for e in loki.entries() if e.labels.get("container") == name]
        client.close()
    return second, shipped


def test_a_json_file_rotated_past_the_last_line_read_is_counted_lost(
    tmp_path, docker_client, prefix
):  # the shared engine: the test image's source
    second, shipped = run_rotation(tmp_path, prefix, "1k")
    assert "first" in shipped and "flood 399 " + "." * 40 in shipped
    assert len(shipped) < 100  # 2 files of 1 KiB kept: most of the flood rotated away
    assert second["lines_lost"] == 1 and second["lines_read"] == second["lines_shipped"] + 1
    (event,) = [e for e in lost_events(tmp_path) if e["source"] == "containers"]
    assert (event["count"], event["at_least"], event["reason"]) == (1, True, "rotated_before_read")


def test_a_json_file_that_kept_every_line_reports_no_loss(
    tmp_path, docker_client, prefix
):  # the shared engine: the test image's source
    second, shipped = run_rotation(tmp_path, prefix, "10m")
    # pushes in flight arrive in any order; the line last accepted comes again on a restart
    # (an exact duplicate, which Loki drops)
    assert sorted(set(shipped)) == sorted(["first"] + [f"flood {i} " + "." * 40 for i in range(400)])
    assert second["lines_lost"] == 0 and second["lines_read"] == second["lines_shipped"] >= 400
    assert [e for e in lost_events(tmp_path) if e["source"] == "containers"] == []
