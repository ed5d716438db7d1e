"""The agent as operators meet it: the install line, a real systemd, no Python.

A systemd container (tests/infra/build-systemd-image.sh; host network, the host's Docker
socket, no Python inside) runs the console's install line against the reference backend on
127.0.0.1, which serves the standalone builds (packaging/build.sh) from --downloads:
install -> enroll -> heartbeats; `systemctl kill -s KILL` of the main process -> restarted,
containers untouched; upgrade by re-running the install line -> same node, new version,
containers untouched; a corrupt checksum -> the old build keeps running; the agent's logs
are in that container's journal; a stalled supervisor is restarted by the watchdog.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from pathlib import Path

import orjson
import pytest

from faden_agent import __version__, protocol
from tests.conftest import TEST_IMAGE
from tests.support.agentproc import wait_for
from tests.support.backendproc import BackendProcess
from tests.support.systemdctr import REPO, SystemdContainer, agent_build
from tests.support.systemdinstall import (  # noqa: F401  (fixtures)
    INSTALL_LINE,
    UNIT,
    current_build,
    image,
    install_env,
    offer,
    run_install_line,
)

pytestmark = [pytest.mark.docker, pytest.mark.systemd]

UPGRADE_VERSION = f"{__version__}.post1"  # newer than the source version by construction
# Operators' knobs, set faster for the test: a drop-in like an operator would write.
FAST_DROP_IN = "[Service]\nRestartSec=1\nWatchdogSec=4\nTimeoutAbortSec=3\n"


@pytest.fixture(scope="module")
def upgrade_build() -> Path:
    """Same sources, a newer version stamp: what the backend offers next."""
    return agent_build(UPGRADE_VERSION, dist=REPO / "build" / "dist-upgrade")


@pytest.fixture
def served(tmp_path, current_build):
    downloads = tmp_path / "downloads"
    offer(downloads, current_build)
    backend = BackendProcess(tmp_path / "backend-data", tmp_path / "backend.log", downloads=downloads)
    backend.start()
    yield backend, downloads
    backend.stop()


@pytest.fixture
def managed_container(docker_client):
    """A container labelled as the agent's: it must survive every restart and upgrade."""
    made = []

    def make(agent_id: str):
        container = docker_client.containers.run(
            TEST_IMAGE,
            ["sleep", "3600"],
            detach=True,
            name=f"faden-test-sd-{uuid.uuid4().hex[:8]}",
            labels={protocol.LABEL_MANAGED: "true", protocol.LABEL_AGENT_ID: agent_id},
        )
        made.append(container)
        return container

    yield make
    for container in made:
        container.remove(force=True)


def started_at(container) -> str:
    container.reload()
    assert container.status == "running", container.status
    return container.attrs["State"]["StartedAt"]


def test_install_line_restart_upgrade_and_bad_checksum(image, served, upgrade_build, managed_container):
    backend, downloads = served
    upgrade = upgrade_build
    agent_id = "sd-" + uuid.uuid4().hex[:8]
    with SystemdContainer(image) as box:
        assert box.sh("command -v python3 python || true").stdout.strip() == ""  # no Python in there

        # The install line: download, verify, install, start; the node enrolls and heartbeats.
        begin = time.monotonic()
        done = run_install_line(box, install_env(backend, agent_id, backend.mint_token()))
        node = backend.wait_node(agent_id, heartbeats=1, timeout_s=60)
        first_heartbeat_s = time.monotonic() - begin
        print(f"\ninstall line -> first heartbeat: {first_heartbeat_s:.1f}s")
        assert f"installed faden-agent {__version__}" in done.stderr
        assert node["version"] == __version__ and node["available_version"] is None
        props = box.wait_active(UNIT)
        env_file = box.sh("stat -c '%a %U' /etc/faden-agent/agent.env && cat /etc/faden-agent/agent.env").stdout
        assert env_file.startswith("600 root")
        assert box.sh("stat -c %a /var/lib/faden-agent/state.json").stdout.strip() == "600"
        container = managed_container(agent_id)
        container_started = started_at(container)

        # kill -9 of the main process: systemd restarts the agent, the container runs on.
        box.sh("mkdir -p /etc/systemd/system/faden-agent.service.d")
        box.sh(
            f"printf '{FAST_DROP_IN}' > /etc/systemd/system/faden-agent.service.d/test.conf && systemctl daemon-reload"
        )
        box.sh(f"systemctl kill -s KILL --kill-who=main {UNIT}")
        after_kill = box.wait_active(UNIT, other_than_pid=props["MainPID"])
        assert int(after_kill["NRestarts"]) >= 1
        beats = backend.node_by_agent(agent_id)["heartbeats"]
        backend.wait_node(agent_id, heartbeats=beats + 2, timeout_s=30)
        assert started_at(container) == container_started
        assert len([n for n in backend.nodes() if n["agent_id"] == agent_id]) == 1

        # The backend now serves a newer build: it says so, and the install line upgrades in place.
        offer(downloads, upgrade)
        assert backend.node_by_agent(agent_id)["available_version"] == UPGRADE_VERSION
        done = run_install_line(box, install_env(backend, agent_id, token=backend.mint_token()))
        assert f"installed faden-agent {UPGRADE_VERSION}" in done.stderr
        upgraded = wait_for(
            lambda: (n := backend.node_by_agent(agent_id)) and n["version"] == UPGRADE_VERSION and n,
            60,
            interval_s=0.3,
            what="the node to report the new version",
        )
        assert upgraded["node_id"] == node["node_id"]  # no new enrollment
        assert upgraded["available_version"] is None
        assert len([n for n in backend.nodes() if n["agent_id"] == agent_id]) == 1
        assert started_at(container) == container_started
        running = box.wait_active(UNIT)

        # A corrupt checksum: refused, the installed build stays and keeps running.
        (downloads / f"{upgrade.name}.sha256").write_text("0" * 64 + f"  {upgrade.name}\n")
        bad = run_install_line(box, install_env(backend, agent_id, token=None), check=False)
        assert bad.returncode != 0
        assert "checksum mismatch" in bad.stderr and "unchanged and keeps running" in bad.stderr
        assert box.sh("/usr/local/bin/faden-agent --version").stdout.strip() == f"faden-agent {UPGRADE_VERSION}"
        assert box.show(UNIT)["MainPID"] == running["MainPID"]  # not even restarted
        assert not box.sh("ls -a /usr/local/bin").stdout.count(".faden-agent.new")  # no leftovers

        # A download error (the build is gone): same promise.
        (downloads / upgrade.name).unlink()
        gone = run_install_line(box, install_env(backend, agent_id, token=None), check=False)
        assert gone.returncode != 0 and "download of" in gone.stderr and "keeps running" in gone.stderr
        assert box.show(UNIT)["MainPID"] == running["MainPID"]

        # The agent's own logs are in this container's journal; the token is not.
        journal = box.journal(UNIT)
        assert "supervisor" in journal and "enrolled with" in journal
        assert "fdn_enr_" not in journal
        status = box.sh("faden-agent status", check=False).stdout
        assert f"node {node['node_id']}" in status and "system service active" in status


def test_watchdog_restarts_a_stalled_supervisor(image, served):
    backend, _ = served
    agent_id = "sdw-" + uuid.uuid4().hex[:8]
    with SystemdContainer(image) as box:
        box.sh("mkdir -p /etc/systemd/system/faden-agent.service.d")
        box.sh(f"printf '{FAST_DROP_IN}' > /etc/systemd/system/faden-agent.service.d/test.conf")
        run_install_line(box, install_env(backend, agent_id, backend.mint_token()))
        backend.wait_node(agent_id, heartbeats=1, timeout_s=60)
        before = box.wait_active(UNIT)
        # The main process is the supervisor itself (the binary's launcher execs it).
        supervisor = before["MainPID"]
        assert "supervisor" in box.sh(f"cat /proc/{supervisor}/cmdline").stdout
        box.sh(f"kill -STOP {supervisor}")
        after = box.wait_active(UNIT, timeout_s=40, other_than_pid=before["MainPID"])
        assert int(after["NRestarts"]) > int(before["NRestarts"])
        assert "Watchdog timeout" in box.sh(f"journalctl -u {UNIT} --no-pager").stdout
        beats = backend.node_by_agent(agent_id)["heartbeats"]
        backend.wait_node(agent_id, heartbeats=beats + 2, timeout_s=30)


def test_service_commands_are_idempotent_and_keep_the_state(image, served, managed_container):
    backend, _ = served
    agent_id = "sdc-" + uuid.uuid4().hex[:8]
    with SystemdContainer(image) as box:
        run_install_line(box, install_env(backend, agent_id, backend.mint_token()))
        node = backend.wait_node(agent_id, heartbeats=1, timeout_s=60)
        running = box.wait_active(UNIT)
        container = managed_container(agent_id)
        container_started = started_at(container)

        # doctor from the binary (docker SDK, pynvml, requests bundled) reads the service's settings.
        report = orjson.loads(box.sh("faden-agent doctor --json").stdout)
        checks = {c["name"]: c["status"] for c in report["checks"]}
        assert checks["service"] == "ok" and checks["credential"] == "ok" and checks["docker"] == "ok", report
        assert checks["journald"] == "ok" and checks["state file"] == "ok", report

        again = box.sh("faden-agent start").stdout  # no variables this time: the env file keeps them
        assert "unchanged" in again and "already running" in again
        assert box.show(UNIT)["MainPID"] == running["MainPID"]

        assert "stopped" in box.sh("faden-agent stop").stdout
        assert box.show(UNIT)["ActiveState"] == "inactive"
        assert box.sh("faden-agent stop").returncode == 0  # stopping a stopped service is fine
        assert "restarted" in box.sh("faden-agent restart").stdout
        box.wait_active(UNIT)
        beats = backend.node_by_agent(agent_id)["heartbeats"]
        assert backend.wait_node(agent_id, heartbeats=beats + 1, timeout_s=30)["node_id"] == node["node_id"]
        assert "system service active" in box.sh("faden-agent status", check=False).stdout

        removed = box.sh("faden-agent uninstall").stdout
        assert "kept the state directory /var/lib/faden-agent" in removed
        assert box.sh("test -e /etc/systemd/system/faden-agent.service", check=False).returncode != 0
        assert box.sh("test -e /etc/faden-agent/agent.env", check=False).returncode != 0
        assert box.sh("test -f /var/lib/faden-agent/state.json", check=False).returncode == 0
        assert "no system service installed" in box.sh("faden-agent uninstall").stdout
        assert "purged" in box.sh("faden-agent uninstall --purge").stdout
        assert box.sh("test -e /var/lib/faden-agent", check=False).returncode != 0
        assert started_at(container) == container_started  # through all of it


def test_install_line_as_a_user_makes_a_user_service(image, served):
    backend, _ = served
    agent_id = "sdu-" + uuid.uuid4().hex[:8]
    socket_gid = Path("/var/run/docker.sock").stat().st_gid
    with SystemdContainer(image) as box:
        # A user allowed to use Docker (the host socket's group), with lingering so that
        # its user manager runs without a login session.
        box.sh(
            f"groupadd -g {socket_gid} hostdocker; useradd -m -s /bin/sh -G hostdocker agentuser && "
            "loginctl enable-linger agentuser"
        )
        box.wait_active("user@1000")
        user = [
            "-u",
            "agentuser",
            "-w",
            "/home/agentuser",
            "-e",
            "XDG_RUNTIME_DIR=/run/user/1000",
            "-e",
            "HOME=/home/agentuser",
        ]
        done = box.sh(
            INSTALL_LINE, env=install_env(backend, agent_id, backend.mint_token()), timeout_s=180, exec_args=user
        )
        assert "user service faden-agent.service enabled and started" in done.stdout
        backend.wait_node(agent_id, heartbeats=1, timeout_s=60)
        files = box.sh(
            "stat -c '%a %U %n' /home/agentuser/.config/faden-agent/agent.env "
            "/home/agentuser/.local/share/faden-agent/state.json /home/agentuser/.local/bin/faden-agent"
        ).stdout
        assert files.splitlines() == [
            "600 agentuser /home/agentuser/.config/faden-agent/agent.env",
            "600 agentuser /home/agentuser/.local/share/faden-agent/state.json",
            "755 agentuser /home/agentuser/.local/bin/faden-agent",
        ]
        status = box.sh("/home/agentuser/.local/bin/faden-agent status", exec_args=user, check=False).stdout
        assert "user service active" in status
        assert box.sh("test -e /etc/systemd/system/faden-agent.service", check=False).returncode != 0


BROKEN_VERSION = f"{__version__}.post9"


# A new build whose `run` fails: it says its version and installs the service like any
# build (through the real one, kept in /opt), but the agent it starts exits at once.
BROKEN_BUILD = f"""#!/bin/sh
# faden-agent standalone build {BROKEN_VERSION} (@ARCH@)
real=/opt/faden-real/faden-agent
case "$1" in
  --version) echo "faden-agent {BROKEN_VERSION}" ;;
  run) echo "this build is broken on purpose: run fails" >&2; exit 1 ;;
  start)
    "$real" "$@" || exit $?
    # The real build wrote the unit for itself: make it start this one, as a new build would.
    sed -i "s#^ExecStart=.*#ExecStart=/usr/local/bin/faden-agent run#" /etc/systemd/system/faden-agent.service
    systemctl daemon-reload
    systemctl restart faden-agent || true ;;
  *) exec "$real" "$@" ;;
esac
"""


def test_a_new_build_whose_run_fails_is_rolled_back(image, served, current_build, tmp_path):
    backend, downloads = served
    agent_id = "sdr-" + uuid.uuid4().hex[:8]
    with SystemdContainer(image) as box:
        run_install_line(box, install_env(backend, agent_id, backend.mint_token()))
        node = backend.wait_node(agent_id, heartbeats=1, timeout_s=60)
        box.sh("mkdir -p /opt/faden-real && cp /usr/local/bin/faden-agent /opt/faden-real/faden-agent")

        broken = tmp_path / current_build.name
        broken.write_text(BROKEN_BUILD.replace("@ARCH@", current_build.name.rsplit("-", 1)[-1]))
        broken.chmod(0o755)
        (tmp_path / f"{broken.name}.sha256").write_text(
            f"{hashlib.sha256(broken.read_bytes()).hexdigest()}  {broken.name}\n"
        )
        offer(downloads, broken)
        done = run_install_line(
            box, {**install_env(backend, agent_id, token=None), "FADEN_AGENT_INSTALL_WAIT_SEC": "20"}, check=False
        )
        print(done.stderr)
        assert done.returncode != 0
        assert f"installed faden-agent {BROKEN_VERSION}" in done.stderr
        assert (
            f"faden-agent {BROKEN_VERSION} did not connect to {backend.url} within 20s; "
            f"rolling back to faden-agent {__version__}" in done.stderr
        )
        assert f"rolled back: faden-agent {__version__} runs again" in done.stderr
        assert box.sh("/usr/local/bin/faden-agent --version").stdout.strip() == f"faden-agent {__version__}"
        assert "broken on purpose" in box.journal(UNIT)  # the new build did get its chance
        box.wait_active(UNIT)
        beats = backend.node_by_agent(agent_id)["heartbeats"]
        again = backend.wait_node(agent_id, heartbeats=beats + 2, timeout_s=30)
        assert again["node_id"] == node["node_id"] and again["version"] == __version__
        assert not box.sh("ls -a /usr/local/bin").stdout.count(".faden-agent.")  # no leftovers
