"""A full disk is a state, not a crash. The state directory is a small real
tmpfs, filled while the agent runs, receives commands and ships logs; then freed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from faden_agent import protocol
from faden_agent.node.membership import enrollment_attempt_id
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import agent_env_for, backend  # noqa: F401
from tests.support.journalfiles import JournalWriter

UNKNOWN_KIND = "no.such.kind"  # rejected by the executor: a real timeline without Docker work
PAD = "x" * 60_000  # a spec big enough that journaling it must grow the files


@pytest.fixture
def small_fs(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "statefs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m,mode=0700", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(directory: Path) -> Path:
    """Write a filler file until the file system says ENOSPC."""
    filler = directory / "filler"
    chunk = b"\0" * 65536
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(chunk)
        except OSError:
            pass
    return filler


def cli_json(env, *args: str) -> dict:
    """`faden-agent ARGS --json`, as an operator runs it; {} while the agent does not answer."""
    out = subprocess.run(
        [sys.executable, "-m", "faden_agent", *args, "--json"], env=env, capture_output=True, text=True
    )
    try:
        return json.loads(out.stdout)
    except ValueError:
        return {}


def disk_full_rows(env) -> dict:
    return {
        w["name"]: w["status"]["disk_full"]
        for w in cli_json(env, "ps").get("workers", [])
        if (w.get("status") or {}).get("disk_full")
    }


def test_a_full_state_disk_holds_work_back_and_loses_nothing(backend, small_fs, tmp_path):
    journal = JournalWriter(tmp_path / "journal")
    journal.append(journal.lines([f"before {i}" for i in range(5)], priority=5))
    env = agent_env_for(
        backend, tmp_path, journal_directory=journal.directory, log_flush_interval_sec=0.2, worker_hang_timeout_sec=15
    )  # a loaded test machine starts workers slowly
    env["FADEN_NODE_AGENT_STATE_PATH"] = str(small_fs / "state.json")
    agent_id = env["FADEN_NODE_AGENT_AGENT_ID"]
    with AgentProcess(env, tmp_path / "agent.log") as agent:
        node = backend.wait_node(agent_id)

        def shipped() -> list[str]:
            return [
                entry["line"]
                for entry in backend.logs(node["node_id"])
                if entry["labels"].get("container") == f"node-{agent_id}"
            ]

        wait_for(lambda: len(shipped()) >= 5, 30, what="the first lines at the backend")
        restarts = {name: w["restarts"] for name, w in agent.workers().items()}
        filler = fill(small_fs)
        beats_before = len(backend.heartbeats(node["node_id"]))
        commands = [backend.send_command(node["node_id"], UNKNOWN_KIND, {"n": i, "pad": PAD}) for i in range(4)]
        journal.append(journal.lines([f"during {i}" for i in range(20)], priority=5))
        rows = wait_for(lambda: disk_full_rows(env), 30, what="ps --json to show disk_full")
        assert any(str(small_fs) in row["path"] for row in rows.values()), rows
        full = wait_for(
            lambda: (s := cli_json(env, "status")).get("disk_full") and s, 10, what="status to show disk_full"
        )
        assert full["disk_full"]["path"].startswith(str(small_fs))
        time.sleep(3)  # a while on a full disk
        beats = backend.heartbeats(node["node_id"])
        assert len(beats) > beats_before, "heartbeats stopped while the disk was full"
        assert any(b.get("data", b).get("disk_full") for b in beats[beats_before:]), beats[-1]
        table = agent.workers()
        assert all(w["state"] == "RUNNING" and w["restarts"] == restarts[n] for n, w in table.items()), table
        assert any(backend.command(c)["state"] == "queued" for c in commands), "the disk did not hold anything back"

        filler.unlink()
        for command_id in commands:
            command = backend.wait_command(command_id, timeout_s=60)
            assert command["state"] == protocol.REJECTED, command
            counts = Counter(record["state"] for record in command["timeline"])
            assert counts[protocol.REJECTED] == 1 and all(n == 1 for n in counts.values()), counts
        expected = [f"before {i}" for i in range(5)] + [f"during {i}" for i in range(20)]
        lines = wait_for(lambda: len(shipped()) >= len(expected) and shipped(), 30, what="every line at the backend")
        assert sorted(lines) == sorted(expected)  # each once
        wait_for(lambda: not disk_full_rows(env), 30, what="disk_full to clear")
        table = agent.workers()
        assert all(w["state"] == "RUNNING" and w["restarts"] == restarts[n] for n, w in table.items()), table


def test_enrollment_on_a_full_disk_spends_the_token_once_when_there_is_space(backend, small_fs, tmp_path):
    env = agent_env_for(backend, tmp_path, worker_hang_timeout_sec=15)
    env["FADEN_NODE_AGENT_STATE_PATH"] = str(small_fs / "state.json")
    filler = fill(small_fs)
    # A first start: the workers cannot create their files; they wait, heartbeating disk_full.
    with AgentProcess(env, tmp_path / "agent.log") as agent:
        rows = wait_for(
            lambda: {"stream", "executor", "inventory"} <= set(r := disk_full_rows(env)) and r,
            30,
            what="the workers to report disk_full",
        )
        assert all(row["path"].startswith(str(small_fs)) for row in rows.values()), rows
        time.sleep(2)
        assert backend.node_by_agent(env["FADEN_NODE_AGENT_AGENT_ID"]) is None  # the token is not spent
        filler.unlink()
        node = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"], timeout_s=30)
        assert (small_fs / "state.json").exists()
        wait_for(lambda: not disk_full_rows(env), 30, what="disk_full to clear")
        table = agent.wait_all_running()
        assert all(w["restarts"] == 0 for w in table.values()), table
    assert len([n for n in backend.nodes() if n.get("agent_id") == env["FADEN_NODE_AGENT_AGENT_ID"]]) == 1, node


def test_a_credential_that_cannot_be_written_is_kept_in_memory_and_written_later(backend, small_fs, tmp_path):
    env = agent_env_for(backend, tmp_path, token=None, worker_hang_timeout_sec=15)
    env["FADEN_NODE_AGENT_STATE_PATH"] = str(small_fs / "state.json")
    with AgentProcess(env, tmp_path / "first.log"):  # a first start, not enrolled: the files exist
        pass
    enrollment_attempt_id(small_fs)  # got that far before the disk filled up
    token = backend.mint_token()
    env_file = small_fs / "agent.env"  # the service's env file, on the same full disk
    env_file.write_text(f"FADEN_NODE_AGENT_ENROLLMENT_TOKEN={token}\n")
    env.update(FADEN_NODE_AGENT_ENROLLMENT_TOKEN=token, FADEN_NODE_AGENT_ENV_FILE=str(env_file))
    filler = fill(small_fs)
    agent = AgentProcess(env, tmp_path / "agent.log").start(wait_running=False)
    agent_id = env["FADEN_NODE_AGENT_AGENT_ID"]
    try:
        wait_for(lambda: backend.node_by_agent(agent_id), 30, what="the enrollment")  # the token is spent
        wait_for(
            lambda: "the credential is kept in memory" in agent.log_text(), 10, what="the credential kept in memory"
        )
        assert not (small_fs / "state.json").exists()
        filler.unlink()
        wait_for(lambda: (small_fs / "state.json").exists(), 30, what="the state file written once there is space")
        wait_for(lambda: token not in env_file.read_text(), 30, what="the spent token out of the env file")
        node = backend.wait_node(agent_id, timeout_s=30)
        command_id = backend.send_command(node["node_id"], UNKNOWN_KIND)
        assert backend.wait_command(command_id, timeout_s=30)["state"] == protocol.REJECTED
        assert agent.workers()["stream"]["restarts"] == 0
    finally:
        agent.stop()
        agent.kill()
    with AgentProcess(env, tmp_path / "again.log"):  # a restart uses the written credential
        backend.wait_node(agent_id, heartbeats=3)
    assert len([n for n in backend.nodes() if n.get("agent_id") == agent_id]) == 1
