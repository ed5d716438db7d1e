"""Threads supervised like processes, with the real agent and the reference backend."""

from __future__ import annotations

import subprocess
import sys

from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import agent_env_for, backend  # noqa: F401

HOOK_ERROR = "thread downlink died: RuntimeError: made to die by the test hook THREAD_DIES"


def test_a_dead_critical_thread_restarts_its_worker_and_ps_says_why(backend, tmp_path):
    env = agent_env_for(backend, tmp_path)
    env.update(FADEN_TEST_HOOKS="1", FADEN_TEST_HOOK_THREAD_DIES="stream/downlink/1.5")
    with AgentProcess(env, tmp_path / "agent.log") as agent:
        first_pid = agent.workers()["stream"]["pid"]
        row = wait_for(
            lambda: (w := agent.workers().get("stream")) and w["restarts"] >= 1 and w["state"] == "RUNNING" and w,
            30,
            what="the stream worker restarted after its downlink died",
        )
        assert row["pid"] != first_pid
        assert row["last_exit"] == f"exit 3: {HOOK_ERROR}", row
        others = agent.workers()
        assert all(others[name]["restarts"] == 0 for name in ("executor", "inventory", "logs")), others
        text = subprocess.run([sys.executable, "-m", "faden_agent", "ps"], env=env, capture_output=True, text=True)
        assert HOOK_ERROR[:15] in text.stdout, text.stdout
        assert "critical thread downlink died" in agent.log_text()
