"""The aarch64 standalone binary, built here under emulation (packaging/build-aarch64.sh) and
smoke-tested under emulation inside the Debian bookworm arm64 root filesystem it was built
in: --version, config, and `run` enrolled against the reference backend (on this host's
loopback) until heartbeats arrive.

Skips when this machine cannot run aarch64 programs, except under
FADEN_TEST_REQUIRE_AARCH64=1 (set by .ci/run), where it fails instead.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import requests

from faden_agent import __version__
from faden_agent.devbackend.builds import build_version, served_version
from tests.support.backendproc import BackendProcess

REPO = Path(__file__).resolve().parents[3]
BINARY = REPO / "dist" / "faden-agent-linux-aarch64"
BINFMT = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")

pytestmark = [pytest.mark.aarch64, pytest.mark.timeout(3600)]


def emulation_missing() -> str | None:
    try:
        if BINFMT.read_text().startswith("enabled"):
            return None
    except OSError:
        pass
    setup = subprocess.run(["bash", str(REPO / "packaging/emulation.sh")], capture_output=True, text=True, timeout=600)
    return None if setup.returncode == 0 else f"no aarch64 emulation: {setup.stderr.strip()[-300:]}"


@pytest.fixture(scope="module")
def arm64_image(docker_client) -> str:
    missing = emulation_missing()
    if missing:
        if os.environ.get("FADEN_TEST_REQUIRE_AARCH64") == "1":
            pytest.fail(missing)
        pytest.skip(missing)
    done = subprocess.run(
        ["bash", str(REPO / "tests/infra/build-arm64-image.sh")], capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def arm64_binary(arm64_image) -> Path:
    """Built when missing or stale (a no-op when .ci/run's build step made it)."""
    begin = time.monotonic()
    done = subprocess.run(
        ["bash", str(REPO / "packaging/build-aarch64.sh")], capture_output=True, text=True, timeout=3000
    )
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    print(f"\naarch64 build: {time.monotonic() - begin:.0f} s ({done.stdout.strip().splitlines()[-1]})")
    return BINARY


def in_arm64(
    image: str,
    binary: Path,
    command: str,
    env: dict[str, str] | None = None,
    *,
    detach: bool = False,
    name: str | None = None,
) -> subprocess.CompletedProcess:
    argv = ["docker", "run", "--network", "host", "-v", f"{binary}:/usr/local/bin/faden-agent:ro"]
    argv += ["-d", "--name", name] if detach else ["--rm"]
    for key, value in (env or {}).items():
        argv += ["-e", f"{key}={value}"]
    return subprocess.run([*argv, image, "bash", "-c", command], capture_output=True, text=True, timeout=900)


def test_aarch64_binary_reports_its_version_config_and_heartbeats(arm64_image, arm64_binary, tmp_path):
    assert build_version(arm64_binary) == __version__
    assert (arm64_binary.parent / f"{arm64_binary.name}.sha256").read_text().split()[1] == arm64_binary.name

    done = in_arm64(
        arm64_image, arm64_binary, "uname -m; TIMEFORMAT='%R s'; time faden-agent --version; time faden-agent --version"
    )
    print(f"\n--- uname -m; --version (first start unpacks, second does not):\n{done.stdout}{done.stderr}")
    assert done.returncode == 0 and done.stdout.splitlines()[:2] == ["aarch64", f"faden-agent {__version__}"]

    backend = BackendProcess(tmp_path / "backend-data", tmp_path / "backend.log")
    backend.start()
    name = f"faden-test-arm64-{uuid.uuid4().hex[:8]}"
    agent_id = f"arm64-{uuid.uuid4().hex[:8]}"
    token = backend.mint_token()
    env = {
        "FADEN_NODE_AGENT_BACKEND_URL": backend.url,
        "FADEN_NODE_AGENT_AGENT_ID": agent_id,
        "FADEN_NODE_AGENT_ENROLLMENT_TOKEN": token,
        "FADEN_NODE_AGENT_HEARTBEAT_INTERVAL_SEC": "1",
        "FADEN_NODE_AGENT_STATE_PATH": "/var/lib/faden-agent/state.json",
        "FADEN_NODE_AGENT_RUNTIME_DIR": "/run/faden-agent",
    }
    try:
        done = in_arm64(arm64_image, arm64_binary, "faden-agent config", env)
        print(f"--- config:\n{done.stdout}{done.stderr}")
        assert done.returncode == 0 and backend.url in done.stdout and token not in done.stdout

        started = in_arm64(arm64_image, arm64_binary, "exec faden-agent run", env, detach=True, name=name)
        assert started.returncode == 0, started.stderr
        begin = time.monotonic()
        node = backend.wait_node(agent_id, heartbeats=2, timeout_s=600)
        print(
            f"--- run: enrolled as {node['node_id']}, {node['heartbeats']} heartbeats after "
            f"{time.monotonic() - begin:.0f} s; version {node['version']}, platform {node.get('platform')}"
        )
        assert node["version"] == __version__
        assert (node.get("platform") or {}).get("machine") in ("aarch64", "arm64")
        ps = subprocess.run(
            ["docker", "exec", "-e", "FADEN_NODE_AGENT_RUNTIME_DIR=/run/faden-agent", name, "faden-agent", "ps"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        print(f"--- ps:\n{ps.stdout}{ps.stderr}")
    finally:
        logs = subprocess.run(["docker", "logs", "--tail", "15", name], capture_output=True, text=True, timeout=60)
        print(f"--- agent log (tail):\n{logs.stdout}{logs.stderr}")
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
        backend.stop()


def test_release_directory_holds_both_builds_and_is_served_as_is(arm64_binary, tmp_path):
    done = subprocess.run(
        ["bash", str(REPO / "packaging/release.sh"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=3000,
    )
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    release = tmp_path / "out" / f"node-agent-v{__version__}"
    names = [
        "faden-agent-linux-aarch64",
        "faden-agent-linux-aarch64.sha256",
        "faden-agent-linux-aarch64.size",
        "faden-agent-linux-x86_64",
        "faden-agent-linux-x86_64.sha256",
        "faden-agent-linux-x86_64.size",
        "install.sh",
    ]
    assert sorted(p.name for p in release.iterdir()) == names  # no .version file, nothing else
    assert (
        subprocess.run(
            ["sha256sum", "--quiet", "-c", "faden-agent-linux-x86_64.sha256", "faden-agent-linux-aarch64.sha256"],
            cwd=release,
        ).returncode
        == 0
    )

    backend = BackendProcess(tmp_path / "backend-data", tmp_path / "backend.log", downloads=release)
    backend.start()
    try:
        for name in names:
            got = requests.get(f"{backend.url}/downloads/{name}", timeout=60)
            assert got.status_code == 200 and got.content == (release / name).read_bytes(), name
        # Which version the backend expects, per architecture, comes from the builds themselves.
        assert served_version(release, "aarch64") == served_version(release, "amd64") == __version__
    finally:
        backend.stop()
