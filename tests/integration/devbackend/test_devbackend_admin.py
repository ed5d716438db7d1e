"""The reference backend's operator surface: the admin CLI of the README quick start,
downloads, and log pushes forwarded to a real Loki-compatible receiver."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import orjson
import pytest
import requests

from faden_agent.backend.client import BackendClient, RequestRejected
from faden_agent.config import load_config
from tests.support.backendproc import BackendProcess, agent_env_for, agent_on_backend, backend  # noqa: F401
from tests.support.lokireceiver import LokiReceiver


def admin_cli(backend, *args: str) -> str:
    env = {"FADEN_ADMIN_TOKEN": backend.admin_token, "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-m", "faden_agent", "admin", *args, "--url", backend.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_quick_start_with_the_admin_cli(backend, agent_on_backend, tmp_path):
    token = admin_cli(backend, "token")
    assert token.startswith("fdn_enr_")
    agent, node = agent_on_backend(enrollment_token=token)
    table = admin_cli(backend, "nodes")
    assert node["node_id"] in table and "stream=RUNNING" in table
    command_id = admin_cli(backend, "send", node["node_id"], "no.such.kind", "--spec", '{"a": 1}')
    backend.wait_command(command_id)
    shown = json.loads(admin_cli(backend, "command", command_id))
    assert shown["id"] == command_id and shown["state"] == "rejected" and shown["timeline"]
    faults = json.loads(admin_cli(backend, "faults", "--stall"))
    assert faults["stall_streams"] is True
    denied = subprocess.run(
        [sys.executable, "-m", "faden_agent", "admin", "nodes", "--url", backend.url, "--admin-token", "wrong"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert denied.returncode == 1 and "HTTP 401" in denied.stderr


def test_downloads_are_served_and_confined(tmp_path):
    builds = tmp_path / "builds"
    builds.mkdir()
    (builds / "faden-agent-0.1.0.tar.gz").write_bytes(b"build bytes")
    (tmp_path / "secret.txt").write_text("outside")
    process = BackendProcess(tmp_path / "data", tmp_path / "backend.log", downloads=builds).start()
    try:
        reply = requests.get(f"{process.url}/downloads/faden-agent-0.1.0.tar.gz", timeout=10)
        assert reply.status_code == 200 and reply.content == b"build bytes"
        assert requests.get(f"{process.url}/downloads/..%2Fsecret.txt", timeout=10).status_code == 404
        assert requests.get(f"{process.url}/downloads/missing", timeout=10).status_code == 404
    finally:
        process.stop()


def test_log_pushes_are_forwarded_to_loki(tmp_path):
    with LokiReceiver() as loki:
        process = BackendProcess(tmp_path / "data", tmp_path / "backend.log", loki_url=loki.url).start()
        try:
            env = agent_env_for(process, tmp_path)
            client = BackendClient(load_config(env))
            reply = client.enroll(env["FADEN_NODE_AGENT_ENROLLMENT_TOKEN"], {"agent_id": "loki-test"})
            client = BackendClient(load_config(env), reply["credential"])
            assert client.log_target() == {"mode": "loki", "url": loki.url}
            now_ns = str(time.time_ns())
            push = {"streams": [{"stream": {"job": "node-agent"}, "values": [[now_ns, "through the backend"]]}]}
            client.push_logs(orjson.dumps(push), gzip=True)
            entries = loki.wait_for(lambda entries: entries, timeout_s=10)
            assert [e.line for e in entries] == ["through the backend"]
            try:
                client.push_logs(b'{"streams": 5}')
            except RequestRejected as exc:
                assert exc.status == 400  # Loki's answer passed through
            else:
                raise AssertionError("a malformed push was accepted")
        finally:
            process.stop()


def test_up_runs_the_agent_against_the_embedded_backend(tmp_path):
    import signal

    from tests.support.agentproc import AgentProcess, agent_env, agent_status, wait_for
    from tests.support.backendproc import free_port

    port = free_port()
    env = agent_env(tmp_path, heartbeat_interval_sec=1, reconnect_min_sec=0.2, reconnect_max_sec=1)
    agent = AgentProcess(
        env, tmp_path / "up.log", argv=[sys.executable, "-m", "faden_agent", "up", "--port", str(port)]
    )
    agent.start()
    try:
        status_env = {**env, "FADEN_NODE_AGENT_BACKEND_URL": f"http://127.0.0.1:{port}"}
        report = wait_for(
            lambda: (s := agent_status(status_env))["connection"] == "connected" and s, 20, what="up: connected"
        )
        assert report["enrolled"]
        data_dir = tmp_path / "state" / "dev-backend"
        token = (data_dir / "admin-token").read_text().strip()
        nodes = requests.get(
            f"http://127.0.0.1:{port}/api/admin/system/nodes", timeout=5, headers={"Authorization": f"Bearer {token}"}
        ).json()["nodes"]
        assert [n["node_id"] for n in nodes] == [report["node_id"]]
        assert agent.stop(signal.SIGTERM) == 0
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://127.0.0.1:{port}/api/admin/system/nodes", timeout=5)
    finally:
        agent.kill()
