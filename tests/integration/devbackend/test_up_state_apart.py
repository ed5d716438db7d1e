"""`faden-agent up` as root, the way the README's first command runs it (no state path, no
runtime folder set), enrolls a state file of its own under the embedded backend's data folder,
never the system agent's /var/lib/faden-agent/state.json: a real install afterwards enrolls
with its own backend, not refused with "state file ... belongs to backend http://127.0.0.1:8000".
A private mount namespace puts a folder of the test's at /var/lib (and /run/faden-agent-up)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import requests

from tests.support.agentproc import agent_env, free_port, wait_for
from tests.support.backendproc import backend  # noqa: F401 - fixture

UP_RUNTIME = Path("/run/faden-agent-up")  # the up agent's runtime folder as root


def in_namespace(binds: dict[Path, Path], argv: list[str]) -> list[str]:
    mounts = " && ".join(f"mount --bind {source} {target}" for target, source in binds.items())
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", f'{mounts} && exec "$@"', "sh", *argv]


def started(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> int | None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(20)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return proc.wait(10)


def up_nodes(port: int, token_file: Path) -> list[dict]:
    try:
        answer = requests.get(
            f"http://127.0.0.1:{port}/api/admin/system/nodes",
            headers={"Authorization": f"Bearer {token_file.read_text().strip()}"},
            timeout=5,
        )
    except (OSError, requests.RequestException):
        return []
    return answer.json()["nodes"] if answer.status_code == 200 else []


@pytest.mark.skipif(os.geteuid() != 0, reason="the root defaults are what is tested")
def test_up_as_root_keeps_its_state_apart_and_a_real_install_enrolls_after_it(tmp_path, backend):  # noqa: F811
    var_lib, up_run = tmp_path / "var-lib", tmp_path / "run-up"
    var_lib.mkdir()
    up_run.mkdir()
    UP_RUNTIME.mkdir(exist_ok=True)  # a mount point; the agent's files go to up_run
    binds = {Path("/var/lib"): var_lib, UP_RUNTIME: up_run}
    agent_id = "up-" + uuid.uuid4().hex[:8]
    env = agent_env(tmp_path, agent_id=agent_id, heartbeat_interval_sec=1, reconnect_min_sec=0.2, reconnect_max_sec=1)
    for name in ("FADEN_NODE_AGENT_STATE_PATH", "FADEN_NODE_AGENT_RUNTIME_DIR", "FADEN_NODE_AGENT_BACKEND_URL"):
        env.pop(name, None)
    python = [sys.executable, "-m", "faden_agent"]

    printed = subprocess.run(
        in_namespace(binds, [*python, "up", "--print-env"]), env=env, capture_output=True, text=True, timeout=60
    )
    assert printed.returncode == 0, printed.stderr
    exports = printed.stdout.splitlines()
    assert "export FADEN_NODE_AGENT_STATE_PATH=/var/lib/faden-agent/dev-backend/agent/state.json" in exports
    assert f"export FADEN_NODE_AGENT_RUNTIME_DIR={UP_RUNTIME}" in exports

    port = free_port()
    data = var_lib / "faden-agent" / "dev-backend"
    up = started(in_namespace(binds, [*python, "up", "--port", str(port)]), env, tmp_path / "up.log")
    try:
        nodes = wait_for(
            lambda: [n for n in up_nodes(port, data / "admin-token") if n["heartbeats"] >= 1],
            60,
            interval_s=0.3,
            what="the up agent's heartbeat",
        )
        assert [n["agent_id"] for n in nodes] == [agent_id]
        own_state = data / "agent" / "state.json"
        assert stat.S_IMODE(own_state.stat().st_mode) == 0o600
        assert not (var_lib / "faden-agent" / "state.json").exists()  # the system agent's, untouched
        assert (up_run / "agent.lock").exists()
    finally:
        assert stop(up) == 0, (tmp_path / "up.log").read_text()[-3000:]

    # The real install on the same machine: the default state path, its own backend and token.
    real_env = {
        **env,
        "FADEN_NODE_AGENT_BACKEND_URL": backend.url,
        "FADEN_NODE_AGENT_ENROLLMENT_TOKEN": backend.mint_token(),
        "FADEN_NODE_AGENT_RUNTIME_DIR": str(tmp_path / "run-real"),
    }
    real = started(in_namespace({Path("/var/lib"): var_lib}, [*python, "run"]), real_env, tmp_path / "real.log")
    try:
        node = backend.wait_node(agent_id, heartbeats=1, timeout_s=60)
        assert node["agent_id"] == agent_id
        assert (var_lib / "faden-agent" / "state.json").exists()
        assert "belongs to backend" not in (tmp_path / "real.log").read_text()
    finally:
        stop(real)
