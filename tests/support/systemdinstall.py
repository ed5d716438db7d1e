"""The console's install line run in a systemd container (tests/support/systemdctr.py): fixtures
`image` (the systemd image) and `current_build` (this tree's standalone build), a build offered
where the reference backend serves downloads, and the install line's environment and run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.backendproc import BackendProcess, free_port
from tests.support.systemdctr import REPO, SystemdContainer, agent_build, systemd_image

UNIT = "faden-agent"
INSTALL_LINE = 'curl -fsSL "$FADEN_NODE_AGENT_BACKEND_URL/downloads/install.sh" | sh'


@pytest.fixture(scope="module")
def image(docker_client) -> str:
    return systemd_image()


@pytest.fixture(scope="module")
def current_build() -> Path:
    return agent_build()


def offer(downloads: Path, binary: Path) -> None:
    """Put one build (binary, .sha256, .size) and install.sh where the backend serves them."""
    downloads.mkdir(exist_ok=True)
    for suffix in ("", ".sha256"):
        shutil.copy2(f"{binary}{suffix}", downloads / f"{binary.name}{suffix}")
    (downloads / f"{binary.name}.size").write_text(f"{binary.stat().st_size}\n")
    shutil.copy2(REPO / "packaging/install.sh", downloads / "install.sh")


def install_env(backend: BackendProcess, agent_id: str, token: str | None) -> dict[str, str]:
    env = {
        "FADEN_NODE_AGENT_BACKEND_URL": backend.url,
        "FADEN_NODE_AGENT_AGENT_ID": agent_id,
        "FADEN_NODE_AGENT_HEARTBEAT_INTERVAL_SEC": "1",
        "FADEN_NODE_AGENT_RECONNECT_MIN_SEC": "0.2",
        "FADEN_NODE_AGENT_RECONNECT_MAX_SEC": "1",
        "FADEN_AGENT_ALLOW_HTTP": "1",  # the reference backend here speaks plain http on loopback
        # host network: boxes of tests running side by side must not meet on the default ports
        "FADEN_NODE_AGENT_METRICS_ADDR": "127.0.0.1:0",
        "FADEN_NODE_AGENT_PEER_PORT": str(free_port()),
    }
    if token:
        env["FADEN_NODE_AGENT_ENROLLMENT_TOKEN"] = token
    return env


def run_install_line(box: SystemdContainer, env: dict[str, str], check: bool = True):
    return box.sh(INSTALL_LINE, env=env, check=check, timeout_s=180)
