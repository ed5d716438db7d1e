"""A real systemd in a Docker container (DESIGN.md section 5), and the agent's standalone build.

    image = systemd_image()          # tests/infra/build-systemd-image.sh, cached by tag
    binary = agent_build()           # packaging/build.sh, cached by a source fingerprint
    with SystemdContainer(image) as box:
        box.sh("systemctl is-system-running")   -> CompletedProcess (check=True by default)
        box.show("faden-agent")                 -> {"ActiveState": ..., "MainPID": ...}

The container has the host network (the reference backend listens on 127.0.0.1) and the
host's Docker socket; it has no Python: the agent runs from its standalone binary only.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Mapping
from pathlib import Path

from tests.support.agentproc import wait_for

REPO = Path(__file__).resolve().parents[2]
IMAGE_SCRIPT = REPO / "tests/infra/build-systemd-image.sh"
BUILD_SCRIPT = REPO / "packaging/build.sh"
CONTAINER_PREFIX = "faden-test-systemd-"

# --privileged is refused on these machines: the capabilities systemd needs, one by one.
RUN_FLAGS = [
    "--cap-add",
    "SYS_ADMIN",
    "--security-opt",
    "seccomp=unconfined",
    "--cgroupns=host",
    "-v",
    "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "--tmpfs",
    "/run",
    "--tmpfs",
    "/run/lock",
    "--network",
    "host",
    "-v",
    "/var/run/docker.sock:/run/docker.sock",
    "--stop-signal",
    "SIGRTMIN+3",
]


def systemd_image() -> str:
    done = subprocess.run(["bash", str(IMAGE_SCRIPT)], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise AssertionError(f"building the systemd image failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]


def agent_build(version: str | None = None, dist: Path | None = None) -> Path:
    """The standalone binary (rebuilt only when the sources or the version changed)."""
    env = dict(os.environ)
    if version:
        env["FADEN_AGENT_BUILD_VERSION"] = version
    if dist:
        env["FADEN_AGENT_DIST"] = str(dist)
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=900, env=env)
    if done.returncode != 0:
        raise AssertionError(f"packaging/build.sh failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    arch = os.uname().machine
    return (dist or REPO / "dist") / f"faden-agent-linux-{arch}"


class SystemdContainer:
    def __init__(self, image: str, name: str | None = None, extra_args: list[str] | None = None):
        """extra_args: more `docker run` options (e.g. a host directory at the same path)."""
        self.image = image
        self.name = name or CONTAINER_PREFIX + uuid.uuid4().hex[:8]
        self.extra_args = list(extra_args or [])

    def __enter__(self) -> SystemdContainer:
        subprocess.run(
            [
                "docker",
                "run",
                "-d",
                "--name",
                self.name,
                *RUN_FLAGS,
                *self.extra_args,
                self.image,
                "/lib/systemd/systemd",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )

        def booted() -> bool:
            state = self.sh("systemctl is-system-running", check=False).stdout.strip()
            return state in ("running", "degraded")

        wait_for(booted, 60, interval_s=0.3, what=f"systemd in {self.name} to finish booting")
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["docker", "rm", "-f", "-v", self.name], capture_output=True, timeout=60)

    def sh(
        self,
        script: str,
        check: bool = True,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 120,
        exec_args: list[str] | None = None,
    ) -> subprocess.CompletedProcess:
        """Run a shell script inside; `env` values are handed over by name (never on a command line);
        `exec_args` are extra `docker exec` options (e.g. -u USER)."""
        names: list[str] = list(exec_args or [])
        for key in env or {}:
            names += ["-e", key]
        done = subprocess.run(
            ["docker", "exec", *names, self.name, "sh", "-c", script],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, **(env or {})},
        )
        if check and done.returncode != 0:
            raise AssertionError(f"`{script}` failed in {self.name} ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        return done

    def show(self, unit: str) -> dict[str, str]:
        out = self.sh(f"systemctl show {unit} -p ActiveState -p SubState -p MainPID -p NRestarts -p Result").stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def wait_active(self, unit: str, timeout_s: float = 60, other_than_pid: str | None = None) -> dict[str, str]:
        def active() -> dict[str, str] | None:
            props = self.show(unit)
            if props.get("ActiveState") == "active" and props.get("MainPID", "0") not in ("0", other_than_pid):
                return props
            return None

        return wait_for(active, timeout_s, interval_s=0.3, what=f"{unit} active in {self.name}")

    def journal(self, unit: str) -> str:
        return self.sh(f"journalctl -u {unit} --no-pager -o cat", check=False).stdout
