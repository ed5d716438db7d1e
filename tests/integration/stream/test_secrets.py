"""Secrets kept secret, with the real agent, the real reference backend, a Loki push
receiver and a real journal file:

- a Loki URL with user:password is not in `config`, the agent's log, `ps --json`, nor in
  the heartbeats the backend received (the log worker's status shows the target redacted);
- the enrollment token is in no process's environment (supervisor, workers, the
  journalctl child) and leaves the service's environment file once spent;
- no core dumps: RLIMIT_CORE is 0 in every process of the agent.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil

from faden_agent.service.envfile import read_env, write_env
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import agent_env_for, backend  # noqa: F401
from tests.support.journalfiles import JournalWriter
from tests.support.lokireceiver import LokiReceiver

PASSWORD = "pw-" + "7f3a9c1e5b"
TOKEN_VAR = "FADEN_NODE_AGENT_ENROLLMENT_TOKEN"


def agent_tree(agent: AgentProcess) -> list[psutil.Process]:
    root = psutil.Process(agent.pid)
    return [root, *root.children(recursive=True)]


def test_loki_url_credentials_and_the_token_never_leak(backend, tmp_path):
    journal = JournalWriter(tmp_path / "journal")
    journal.append(journal.lines([f"secret test line {i}" for i in range(20)], _SYSTEMD_UNIT="t.service"))
    with LokiReceiver() as loki:
        loki.set_mode("error", status=500)  # the first pushes fail: the failure is logged with the target
        loki_url = loki.url.replace("http://", f"http://faden-user:{PASSWORD}@")
        env_file = tmp_path / "agent.env"
        env = agent_env_for(
            backend, tmp_path, loki_url=loki_url, journal_directory=journal.directory, env_file=env_file
        )
        write_env(env_file, {TOKEN_VAR: env[TOKEN_VAR], "FADEN_NODE_AGENT_LOG_LEVEL": "info"})
        agent = AgentProcess(env, tmp_path / "agent.log").start()
        try:
            node = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"], heartbeats=2)
            wait_for(
                lambda: "retrying until it works" in agent.log_path.read_text(),
                30,
                interval_s=0.2,
                what="a failed push logged",
            )
            loki.set_mode("ok")
            loki.wait_for(lambda entries: len(entries) >= 20, 30)

            shown = subprocess.run(
                [sys.executable, "-m", "faden_agent", "config"], env=env, capture_output=True, text=True, timeout=60
            )
            ps = subprocess.run(
                [sys.executable, "-m", "faden_agent", "ps", "--json"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert ps.stdout and json.loads(ps.stdout)
            logs_status = json.dumps(json.loads(ps.stdout))
            assert "<redacted>@" in logs_status  # the target is shown, without its credentials
            heartbeats = json.dumps(backend.heartbeats(node["node_id"]))
            for where, text in (
                ("config", shown.stdout + shown.stderr),
                ("ps --json", ps.stdout),
                ("heartbeats", heartbeats),
                ("the agent's log", agent.log_path.read_text()),
            ):
                assert PASSWORD not in text, f"the Loki password is in {where}"
            assert "faden-user:" not in shown.stdout and "<redacted>@" in shown.stdout

            # The token: gone from the environment file once spent, and from every process.
            wait_for(lambda: TOKEN_VAR not in read_env(env_file), 15, what="the token removed from the env file")
            assert read_env(env_file) == {"FADEN_NODE_AGENT_LOG_LEVEL": "info"}  # the rest is kept
            tree = agent_tree(agent)
            names = {p.name() for p in tree}
            assert "journalctl" in names, names  # a child exec'd after the start
            for proc in tree:
                environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
                assert env[TOKEN_VAR].encode() not in environ, f"the token is in the environment of {proc.name()}"
                limits = Path(f"/proc/{proc.pid}/limits").read_text()
                core = next(line for line in limits.splitlines() if line.startswith("Max core file size"))
                assert core.split()[4:6] == ["0", "0"], (proc.name(), core)
        finally:
            agent.stop()
