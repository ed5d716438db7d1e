"""A Docker engine of a test's or a benchmark's own, beside the shared one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from tests.support.agentproc import wait_for


def dockerd_argv(root: Path, data_root: Path, host: str) -> list[str]:
    """A dockerd beside the shared one: its own data root, exec root, pid file and socket
    under `root`, no bridge and no iptables rules (nothing of the host's network touched)."""
    return [
        "dockerd",
        "--data-root",
        str(data_root),
        "--exec-root",
        str(root / "exec"),
        "--pidfile",
        str(root / "docker.pid"),
        "-H",
        host,
        "--bridge=none",
        "--iptables=false",
        "--ip6tables=false",
        "--ip-masq=false",
        "--shutdown-timeout",
        "2",
    ]


class PrivateEngine:
    """A dockerd of its own (own data root, socket; no bridge, no iptables), holding `image`
    copied from the shared engine when one is named: on a machine whose shared engine other
    work keeps busy, an agent's Docker events, inventory changes and dockerd's CPU are then
    the agent's own (bench/footprint_bench.py), and its data root is not the default."""

    def __init__(self, root: Path, image: str | None = None, path_prefix: Path | None = None):
        self.root = root
        self.image = image
        self.path_prefix = path_prefix  # a folder searched first for dockerd's helpers
        self.socket = root / "docker.sock"
        self.host = f"unix://{self.socket}"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> PrivateEngine:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "dockerd.log", "ab") as log_file:
            self.proc = subprocess.Popen(
                # In a network namespace of its own: a dockerd with --bridge=none deletes the
                # host's docker0 at start (Docker's removeDefaultBridgeInterface).
                ["unshare", "--net", "--", *dockerd_argv(self.root, self.root / "data", self.host)],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=with_path_prefix(self.path_prefix),
            )
        wait_for(lambda: self.docker("version", check=False).returncode == 0, 90, 0.2, "a private dockerd")
        if self.image:
            # from the machine's 20.10, in the CLI's own version (a run against Engine 29 names
            # 1.44 and that engine in the environment: neither is this one)
            plain = {k: v for k, v in os.environ.items() if k not in ("DOCKER_API_VERSION", "DOCKER_HOST")}
            saved = subprocess.run(
                ["docker", "save", self.image], capture_output=True, check=True, timeout=120, env=plain
            ).stdout
            load = ["docker", "-H", self.host, "load"]
            subprocess.run(load, input=saved, capture_output=True, check=True, timeout=120, env=plain)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.proc is not None:
            ids = self.docker("ps", "-aq", check=False).stdout.split()
            if ids:
                self.docker("rm", "-f", *ids, check=False)
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def docker(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return docker_cli(self.host, *args, check=check)


def with_path_prefix(folder: Path | None) -> dict[str, str]:
    """This process's environment, `folder` first on PATH when given."""
    env = dict(os.environ)
    if folder is not None:
        env["PATH"] = f"{folder}:{env.get('PATH', '')}"
    return env


def docker_cli(host: str, *args: str, check: bool = True, api_version: str | None = None):
    """The machine's docker CLI against the engine at `host`, at its own API version unless
    one is named (a test run against Engine 29 names one in the environment: not here)."""
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_API_VERSION"}
    if api_version:
        env["DOCKER_API_VERSION"] = api_version
    return subprocess.run(
        ["docker", "-H", host, *args], capture_output=True, text=True, check=check, timeout=120, env=env
    )
