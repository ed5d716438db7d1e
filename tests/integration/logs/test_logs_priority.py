"""The log worker ships at a lower CPU priority than the rest of the agent (LOG_NICE, issue
13): a log flood on a busy machine yields the CPU to the stream worker's heartbeats. Its
threads and its journalctl inherit the nice value; the other workers keep the agent's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.support.agentproc import AgentProcess, agent_env, wait_for
from tests.support.journalfiles import JournalWriter


def thread_nices(pid: int) -> set[int]:
    """The nice value of every thread of pid (Linux keeps it per thread)."""
    nices = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue  # a thread that ended meanwhile
        nices.add(int(fields[16]))  # field 19 of stat: nice
    return nices


def journalctl_of(pid: int) -> psutil.Process | None:
    for child in psutil.Process(pid).children(recursive=True):
        if child.name() == "journalctl":
            return child
    return None


@pytest.mark.parametrize("increment", [None, 0, 7])
def test_the_log_worker_and_its_journalctl_run_at_the_lower_priority(tmp_path, increment):
    journal = JournalWriter(tmp_path / "journal")
    journal.append([journal.entry("priority seed")])
    settings = {} if increment is None else {"log_nice": increment}
    env = agent_env(tmp_path, journal_directory=journal.directory, **settings)
    expected = 10 if increment is None else increment
    own = os.getpriority(os.PRIO_PROCESS, 0)  # the agent inherits the test runner's
    with AgentProcess(env, tmp_path / "agent.log") as agent:
        workers = agent.wait_all_running()
        logs = workers["logs"]["pid"]
        journalctl = wait_for(lambda: journalctl_of(logs), 15, what="the log worker's journalctl")
        # The worker's main thread lowered itself before starting its threads; ZeroMQ's I/O
        # thread was started before that and keeps the agent's value.
        assert os.getpriority(os.PRIO_PROCESS, logs) == own + expected
        assert own + expected in thread_nices(logs)
        assert thread_nices(journalctl.pid) == {own + expected}
        for name in ("stream", "executor", "inventory"):
            assert thread_nices(workers[name]["pid"]) == {own}, name
        assert thread_nices(agent.proc.pid) == {own}


def test_a_bad_value_is_named_in_one_line(tmp_path):
    env = agent_env(tmp_path, log_nice="-5")
    out = subprocess.run(
        [sys.executable, "-m", "faden_agent", "run"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "faden-agent: FADEN_NODE_AGENT_LOG_NICE='-5' is not allowed: expected a nice increment 0..19"
    ]
