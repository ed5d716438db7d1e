"""One agent per state directory: a second `faden-agent run` refuses clearly and
the first one is untouched."""

from __future__ import annotations

import subprocess
import sys

from tests.support.agentproc import AgentProcess, agent_env


def test_a_second_run_on_the_same_state_refuses_and_leaves_the_first_untouched(tmp_path):
    env = agent_env(tmp_path)
    with AgentProcess(env, tmp_path / "first.log") as first:
        before = {name: row["pid"] for name, row in first.workers().items()}
        second = subprocess.run(
            [sys.executable, "-m", "faden_agent", "run"], env=env, capture_output=True, text=True, timeout=60
        )
        assert second.returncode != 0
        assert f"another faden-agent (pid {first.pid}) is running with the state directory" in second.stderr, (
            second.stderr
        )
        assert "Traceback" not in second.stderr
        rows = first.wait_all_running()  # its control socket still answers: not unlinked
        assert {name: row["pid"] for name, row in rows.items()} == before
        assert all(row["restarts"] == 0 for row in rows.values())
    # once the first one is gone, the directory is free again (no stale lock)
    with AgentProcess(env, tmp_path / "third.log") as third:
        assert third.workers()
