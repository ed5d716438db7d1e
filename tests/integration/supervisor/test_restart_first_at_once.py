"""Restart latency path: the first failure of a worker restarts it at once, a
repeated one still backs off (the delays the supervisor logs are its policy's decisions,
not timings)."""

from __future__ import annotations

import os
import re
import signal

from tests.support.agentproc import AgentProcess, agent_env, wait_for
from tests.support.sampleworkers import supervisor_argv

STEADY = "tests.support.sampleworkers:SteadyWorker"


def delays(log: str, name: str) -> list[float]:
    return [float(d) for d in re.findall(rf"worker {name} exited \(signal SIGKILL\); restarting in ([0-9.]+)s", log)]


def test_first_kill_restarts_at_once_a_second_within_the_window_backs_off(tmp_path):
    env = agent_env(tmp_path, RESTART_BACKOFF_MIN_SEC="0.5", RESTART_MAX="10", RESTART_WINDOW_SEC="600")
    workers = {"stream": STEADY, "executor": STEADY}
    with AgentProcess(env, tmp_path / "agent.log", argv=supervisor_argv(workers)) as agent:
        for expected in (1, 2, 3):
            old = agent.wait_all_running()["executor"]["pid"]
            os.kill(old, signal.SIGKILL)
            wait_for(
                lambda old=old: (
                    (w := agent.workers().get("executor")) and w["pid"] not in (None, old) and w["state"] == "RUNNING"
                ),
                20,
                what=f"restart {expected}",
            )
        logged = delays(agent.log_text(), "executor")
        assert len(logged) == 3, agent.log_text()[-2000:]
        assert logged[0] == 0.0
        assert 0.4 <= logged[1] <= 0.6 and 0.8 <= logged[2] <= 1.2  # min +-20 %, then doubled
        assert agent.workers()["stream"]["restarts"] == 0
