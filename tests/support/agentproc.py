"""Test helpers: run the real agent (`faden-agent run`) as a subprocess in a private
runtime/state directory and ask it `ps` over its real control socket."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faden_agent.ipc import Endpoints, request
from tests.support.ports import free_port  # noqa: F401 - the tests' servers import it from here

# Kept from the test run's own environment: CI runs the supervisor's tests (and may run the
# chaos run) a second time with FADEN_NODE_AGENT_PREFORK=off.
PASSED_THROUGH = ("FADEN_NODE_AGENT_PREFORK",)


def agent_env(tmp_path: Path, **overrides: Any) -> dict[str, str]:
    """An environment for one agent under tmp_path; overrides are FIELD=value without prefix."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FADEN_NODE_AGENT_") or k in PASSED_THROUGH}
    env.update(
        FADEN_NODE_AGENT_RUNTIME_DIR=str(tmp_path / "run"),
        FADEN_NODE_AGENT_STATE_PATH=str(tmp_path / "state" / "state.json"),
        FADEN_NODE_AGENT_RAY_LOG_DIR=str(tmp_path / "ray"),
        FADEN_NODE_AGENT_WORKER_LIVENESS_SEC="0.2",
        FADEN_NODE_AGENT_WORKER_HANG_TIMEOUT_SEC="2",
        FADEN_NODE_AGENT_RESTART_BACKOFF_MIN_SEC="0.1",
        FADEN_NODE_AGENT_RESTART_BACKOFF_MAX_SEC="2",
        FADEN_NODE_AGENT_STOP_TIMEOUT_SEC="5",
        # Every worker from the start, as tests expect; on demand is tested by itself (test_peer_on_demand)
        FADEN_NODE_AGENT_PEER_START="always",
        # A port of its own per agent (ps tells which): agents of parallel tests never share one
        FADEN_NODE_AGENT_METRICS_ADDR="127.0.0.1:0",
        FADEN_NODE_AGENT_PEER_PORT=str(free_port()),  # the peer worker listens from the start
        PYTHONUNBUFFERED="1",
    )
    for key, value in overrides.items():
        env[f"FADEN_NODE_AGENT_{key.upper()}"] = str(value)
    return env


def wait_for(
    predicate: Callable[[], Any],
    timeout_s: float = 15.0,
    interval_s: float = 0.05,
    what: str | Callable[[], str] = "condition",  # a callable: said as things stand at the timeout
) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what() if callable(what) else what}")
        time.sleep(interval_s)


# The agents the running test started (its fixtures' too): a failed test's report ends with
# each one's log (tests/conftest.py), what the agent did while the test waited.
STARTED: list[AgentProcess] = []
LOG_IN_REPORT_CHARS = 8000


class AgentProcess:
    """One supervisor process (and its workers) started the way an operator starts it."""

    def __init__(self, env: dict[str, str], log_path: Path, argv: list[str] | None = None):
        self.env = env
        self.log_path = log_path
        self.argv = argv or [sys.executable, "-m", "faden_agent", "run"]
        self.proc: subprocess.Popen | None = None
        self.endpoints = Endpoints(Path(env["FADEN_NODE_AGENT_RUNTIME_DIR"]))

    def start(self, wait_running: bool = True, timeout_s: float = 60.0) -> AgentProcess:
        self._log = open(self.log_path, "ab")
        STARTED.append(self)
        self.proc = subprocess.Popen(
            self.argv, env=self.env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        if wait_running:
            self.wait_all_running(timeout_s)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def ps(self, timeout_s: float = 1.0) -> dict[str, Any] | None:
        reply = request(self.endpoints.control, "ps", timeout_s=timeout_s)
        return reply.body if reply is not None else None

    def workers(self) -> dict[str, dict[str, Any]]:
        table = self.ps()
        return {w["name"]: w for w in table["workers"]} if table else {}

    def row_sent_after(self, worker: str, since_mono: float, timeout_s: float = 10.0) -> dict[str, Any]:
        """The worker's `ps` row once its status is from an "alive" message sent after `since_mono`
        (time.monotonic() here: CLOCK_MONOTONIC is one clock for the machine). `ps` shows the last
        message, up to WORKER_LIVENESS_SEC older than what the worker wrote since (a record, a file)."""

        def sent_after() -> dict[str, Any] | None:
            asked = time.monotonic()  # the supervisor's now, when it answers, is later still
            row = self.workers().get(worker) or {}
            age = row.get("alive_age_s")
            # sent = its now - age >= asked - age, the age rounded to the millisecond
            return row if age is not None and asked - age - 0.001 > since_mono else None

        return wait_for(sent_after, timeout_s, what=f"a status of {worker} sent after the time given")

    def wait_all_running(self, timeout_s: float = 60.0) -> dict[str, dict[str, Any]]:
        def all_running() -> dict | None:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"agent exited with {self.proc.returncode}: {self.log_text()[-3000:]}")
            rows = self.workers()
            # a worker started on demand and not wanted yet counts (PEER_START=on_demand)
            up = all(w["state"] == "RUNNING" or (w.get("status") or {}).get("on_demand") for w in rows.values())
            return rows if rows and up else None

        return wait_for(all_running, timeout_s, what="all workers RUNNING")

    def wait_ray_listed(self, timeout_s: float = 60.0) -> None:
        """Until the Ray log source's first full listing is done: a rotated file it meets
        there without a position counts as older than the agent (not shipped), so a test
        that writes rotated files starts after it."""

        def listed() -> bool:
            sources = ((self.workers().get("logs") or {}).get("status") or {}).get("sources") or {}
            return (sources.get("ray-serve") or {}).get("scans", {}).get("full", 0) >= 1

        wait_for(listed, timeout_s, interval_s=0.1, what="the Ray log source's first listing")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 15.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        """SIGKILL the supervisor and, to leave nothing behind in tests, its process group."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)

    def __enter__(self) -> AgentProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
        self.kill()
        if getattr(self, "_log", None):
            self._log.close()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set (VmHWM) in MiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for pid {pid}")


def agent_status(env: dict[str, str]) -> dict:
    """`faden-agent status --json` of the agent this environment names, read as its operator would."""
    out = subprocess.run(
        [sys.executable, "-m", "faden_agent", "status", "--json"], env=env, capture_output=True, text=True, timeout=20
    )
    return json.loads(out.stdout)
