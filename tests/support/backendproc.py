"""The reference backend as a real subprocess, for end-to-end tests.

API (import what you need; fixtures must be imported into the test module to be used):

    from tests.support.backendproc import BackendProcess, backend, agent_on_backend  # noqa: F401

    BackendProcess(data_dir, log_path, keepalive_sec=0.5, tls_cert=None, tls_key=None, downloads=None,
                   loki_url=None)
        .start() / .stop() / .kill() / .restart()      same port across restarts
        .url, .admin_token, .admin  (an AdminClient: mint_token, nodes, node, send_command,
                                     command, events, heartbeats, timeline, inventory, logs,
                                     faults, requests_log, revoke, stats)
        .mint_token(), .nodes(), .node_by_agent(agent_id), .send_command(node_id, kind, spec, command_id=None),
        .command(id), .events(node_id), .inventory(node_id), .logs(node_id), .heartbeats(node_id),
        .wait_node(agent_id, heartbeats=1), .wait_command(id, states=TERMINAL_STATES)

    agent_env_for(backend, tmp_path, token=..., **overrides) -> env for tests.support.agentproc.AgentProcess:
        backend URL, a fresh one-time token, a unique AGENT_ID, short intervals.

    accepted(backend, credential) -> the HTTP status of an empty uplink with that credential.

    fixture `backend`: a started BackendProcess under tmp_path (stopped after the test).
    fixture `agent_on_backend`: factory(**overrides) -> (AgentProcess started, node dict) of an
        agent enrolled against `backend`; every agent is stopped after the test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import requests

from faden_agent import protocol
from faden_agent.devbackend.admin import AdminClient, AdminError
from tests.support.agentproc import AgentProcess, agent_env, free_port, wait_for  # noqa: F401 - free_port for tests

ADMIN_TOKEN = "test-admin-" + uuid.uuid4().hex


class BackendProcess:
    def __init__(
        self,
        data_dir: Path,
        log_path: Path,
        *,
        keepalive_sec: float = 0.5,
        port: int | None = None,
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
        ca_bundle: Path | None = None,
        downloads: Path | None = None,
        loki_url: str | None = None,
        loki_tenant: str | None = None,
        admin_token: str = ADMIN_TOKEN,
        host: str = "127.0.0.1",
    ):
        self.data_dir = data_dir
        self.log_path = log_path
        self.port = port or free_port(host)
        self.admin_token = admin_token
        scheme = "https" if tls_cert else "http"
        self.url = f"{scheme}://{host}:{self.port}"
        self.argv = [
            sys.executable,
            "-m",
            "faden_agent",
            "dev-backend",
            "--host",
            host,
            "--port",
            str(self.port),
            "--data",
            str(data_dir),
            "--keepalive-sec",
            str(keepalive_sec),
        ]
        for flag, value in (
            ("--tls-cert", tls_cert),
            ("--tls-key", tls_key),
            ("--downloads", downloads),
            ("--loki-url", loki_url),
            ("--loki-tenant", loki_tenant),
        ):
            if value:
                self.argv += [flag, str(value)]
        # The admin token travels in the environment, not on the command line.
        self.env = {**os.environ, "FADEN_ADMIN_TOKEN": admin_token, "PYTHONUNBUFFERED": "1"}
        self.admin = AdminClient(self.url, admin_token, verify=str(ca_bundle) if ca_bundle else True)
        self.proc: subprocess.Popen | None = None

    # ------------------------------------------------------------------ process

    def start(self, timeout_s: float = 60.0) -> BackendProcess:
        self._log = open(self.log_path, "ab")
        start_offset = self.log_path.stat().st_size
        self.proc = subprocess.Popen(
            self.argv, env=self.env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

        def listening() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"dev-backend exited with {self.proc.returncode}: {self.log_text()[-2000:]}")
            return "listening on" in self.log_text()[start_offset:]

        wait_for(listening, timeout_s, what="dev-backend listening")
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self._log.close()

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def restart(self, down_s: float = 0.0) -> None:
        self.kill()
        time.sleep(down_s)
        self.start()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # ------------------------------------------------------------------ admin shortcuts

    def mint_token(self) -> str:
        return self.admin.mint_token()

    def nodes(self) -> list[dict[str, Any]]:
        return self.admin.nodes()

    def node_by_agent(self, agent_id: str) -> dict[str, Any] | None:
        return next((n for n in self.nodes() if n["agent_id"] == agent_id), None)

    def send_command(self, node_id: str, kind: str, spec: Any = None, command_id: str | None = None) -> str:
        return self.admin.send_command(node_id, kind, spec, command_id)

    def command(self, command_id: str) -> dict[str, Any]:
        return self.admin.command(command_id)

    def events(self, node_id: str) -> list[dict[str, Any]]:
        return self.admin.events(node_id)

    def inventory(self, node_id: str) -> dict[str, Any]:
        return self.admin.inventory(node_id)

    def logs(self, node_id: str) -> list[dict[str, Any]]:
        return self.admin.logs(node_id)

    def heartbeats(self, node_id: str) -> list[dict[str, Any]]:
        return self.admin.heartbeats(node_id)

    def wait_node(self, agent_id: str, heartbeats: int = 1, timeout_s: float = 20.0) -> dict[str, Any]:
        def ready() -> dict[str, Any] | None:
            node = self.node_by_agent(agent_id)
            return node if node and node["heartbeats"] >= heartbeats else None

        return wait_for(ready, timeout_s, interval_s=0.1, what=f"node {agent_id} with {heartbeats} heartbeats")

    def wait_command(
        self, command_id: str, states: Iterable[str] = protocol.TERMINAL_STATES, timeout_s: float = 30.0
    ) -> dict[str, Any]:
        states = tuple(states)

        def reached() -> dict[str, Any] | None:
            try:
                command = self.command(command_id)
            except AdminError:
                return None
            return command if command["state"] in states else None

        return wait_for(reached, timeout_s, interval_s=0.1, what=f"command {command_id} in {states}")


def agent_env_for(
    backend: BackendProcess, tmp_path: Path, token: str | None = "mint", **overrides: Any
) -> dict[str, str]:
    """An agent environment pointed at `backend`, with a fresh token unless token=None/given."""
    settings: dict[str, Any] = {
        "backend_url": backend.url,
        "agent_id": "test-" + uuid.uuid4().hex[:10],
        "heartbeat_interval_sec": 1,
        "stream_keepalive_sec": 0.5,
        "reconnect_min_sec": 0.2,
        "reconnect_max_sec": 1,
        "request_timeout_sec": 5,
    }
    if token == "mint":
        settings["enrollment_token"] = backend.mint_token()
    elif token:
        settings["enrollment_token"] = token
    settings.update(overrides)
    return agent_env(tmp_path, **settings)


def accepted(backend: BackendProcess, credential: str) -> int:
    """The HTTP status of an empty uplink with this credential (200: it counts)."""
    return requests.post(
        backend.url + protocol.UPLINK_PATH,
        json={"records": []},
        headers={"Authorization": f"Bearer {credential}"},
        timeout=10,
    ).status_code


@pytest.fixture
def backend(tmp_path: Path):
    process = BackendProcess(tmp_path / "backend-data", tmp_path / "backend.log")
    process.start()
    yield process
    process.stop()


@pytest.fixture
def agent_on_backend(backend: BackendProcess, tmp_path: Path):
    started: list[AgentProcess] = []

    def make(**overrides: Any) -> tuple[AgentProcess, dict[str, Any]]:
        root = tmp_path / f"agent{len(started)}"
        root.mkdir()
        env = agent_env_for(backend, root, **overrides)
        agent = AgentProcess(env, root / "agent.log")
        started.append(agent)
        agent.start()
        node = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])
        return agent, node

    yield make
    for agent in started:
        agent.stop()
        agent.kill()
