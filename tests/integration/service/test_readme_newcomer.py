"""The README's first command on a fresh Debian 12 whose only Python is the system's.

The container is a debootstrap minbase with python3 and python3-venv only (no pip in the
system Python, PEP 668's EXTERNALLY-MANAGED in place), an ordinary user `newcomer`, the
working tree copied into ~/faden-agent, and no network at all: its own loopback carries the
embedded backend's 127.0.0.1:8000 (no clash with the host), and pip reads a wheelhouse that
the host downloaded once from PyPI (PIP_NO_INDEX + PIP_FIND_LINKS, the way a mirror is
configured; the command itself is the README's, verbatim). Passes when the embedded backend
has a heartbeat of the enrolled node.

Time (measured here, 2 shared cores): the image is built once (debootstrap, 129 s, cached by
tag), the wheelhouse once (14 s, cached by the dependency list); then 28 s for both tests,
mostly `pip install .` in the container. They run in .ci/run's parallel part (marked docker).
"""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from tests.support.agentproc import wait_for
from tests.support.newcomer import python_image, readme_first_command, source_tar, wheelhouse

pytestmark = pytest.mark.docker

HOME = "/home/newcomer"
# The embedded backend's admin API as seen from inside, with the system Python's stdlib only.
NODES_PROBE = """
import json, pathlib, urllib.request
token = (pathlib.Path.home() / ".local/share/faden-agent/dev-backend/admin-token").read_text().strip()
req = urllib.request.Request(
    "http://127.0.0.1:8000/api/admin/system/nodes", headers={"Authorization": "Bearer " + token}
)
print(json.dumps(json.load(urllib.request.urlopen(req, timeout=5))["nodes"]))
"""


def _exec(name: str, script: str, user: str = "newcomer", timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", "exec", "-u", user, "-w", f"{HOME}/faden-agent", name, "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


@pytest.fixture
def newcomer_box(docker_client, tmp_path):
    image, wheels = python_image(), wheelhouse()
    name = f"faden-test-newcomer-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        [
            "docker",
            "create",
            "--name",
            name,
            "--network",
            "none",
            "-v",
            f"{wheels}:/wheels:ro",
            "-e",
            "PIP_NO_INDEX=1",
            "-e",
            "PIP_FIND_LINKS=/wheels",
            "-e",
            "PIP_DISABLE_PIP_VERSION_CHECK=1",
            image,
            "sleep",
            "infinity",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    try:
        subprocess.run(
            ["docker", "cp", "-", f"{name}:{HOME}"], input=source_tar(), check=True, capture_output=True, timeout=60
        )
        subprocess.run(["docker", "start", name], check=True, capture_output=True, timeout=60)
        yield name
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)


def test_the_system_python_there_refuses_plain_pip_install(newcomer_box):
    """The machine is what the issue met: pip into the system Python is refused (PEP 668)."""
    done = _exec(newcomer_box, "python3 -m venv /tmp/probe && /tmp/probe/bin/pip --python /usr/bin/python3 install six")
    assert done.returncode != 0 and "externally-managed-environment" in done.stderr, done.stderr[-2000:]
    assert "No module named pip" in _exec(newcomer_box, "python3 -m pip --version").stderr


def test_readme_first_command_reaches_a_heartbeat(newcomer_box, tmp_path):
    command = readme_first_command()
    assert "faden-agent up" in command, command
    log = open(tmp_path / "up.log", "wb")
    up = subprocess.Popen(
        ["docker", "exec", "-u", "newcomer", "-w", f"{HOME}/faden-agent", newcomer_box, "bash", "-c", command],
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def heartbeat():
        if up.poll() is not None:
            raise AssertionError(
                f"the README's first command ended ({up.returncode}):\n"
                f"{(tmp_path / 'up.log').read_text(errors='replace')[-4000:]}"
            )
        probe = _exec(newcomer_box, f"python3 -c '{NODES_PROBE}'", timeout_s=30)
        if probe.returncode != 0:
            return None
        nodes = json.loads(probe.stdout)
        return nodes if nodes and nodes[0]["heartbeats"] >= 1 else None

    try:
        nodes = wait_for(heartbeat, 600, interval_s=2, what="a heartbeat after the README's first command")
        assert len(nodes) == 1 and nodes[0]["agent_id"], nodes
    finally:
        up.kill()
        up.wait(30)
        log.close()
