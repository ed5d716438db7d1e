"""A real Docker Engine 29.1.5 (containerd image store, API 1.52, minimum 1.44) for tests,
started by tests/infra/run-dockerd29.sh from the pinned build (tests/support/testtools.py,
tool docker-29.1.5) under a folder of its own, on a
bridge of its own (a unique name and /24 in 198.18.0.0/15, so parallel runs never clash),
holding the test image copied from the shared 20.10 engine. Talk to it with docker-py
(`Engine29.client()`, version="auto"): the 20.10 `docker` CLI is refused by it."""

from __future__ import annotations

import fcntl
import ipaddress
import os
import shutil
import signal
import subprocess
import time
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import docker

from tests.support import testtools
from tests.support.privateengine import docker_cli, with_path_prefix

RUN_DOCKERD29 = Path(__file__).resolve().parents[1] / "infra/run-dockerd29.sh"
TOOL = "docker-29.1.5"
VERSION = "29.1.5"
READY_TIMEOUT_S = 90.0
HOST_ENGINE = "unix:///var/run/docker.sock"  # the machine's 20.10, where the test image is built
CLI_API_VERSION = "1.44"  # the 20.10 CLI speaks it well enough for the tests' commands
STOP_TIMEOUT_S = 60.0
# Bridges are chosen under this lock: picking a free /24 and making the bridge is one step.
BRIDGE_LOCK = Path("/tmp/faden-engine29-bridges.lock")
# 198.19.0.0/16, half of the benchmarking range: 198.18.x is where people make theirs by hand.
SUBNETS = ipaddress.ip_network("198.19.0.0/16")
BRIDGE_PREFIX = "f29"
OWNER_ALIAS = "faden-engine29-pid-"  # + the pid of the test process that made the bridge


def missing_piece() -> str | None:
    """What this machine lacks to run an Engine 29 besides its build (testtools.require), or None."""
    for tool in ("runc", "ip"):
        if shutil.which(tool) is None:
            return f"`{tool}` is missing; run tests/infra/start-services.sh"
    return None


def networks_in_use() -> list[ipaddress.IPv4Network]:
    out = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, check=True, timeout=10).stdout
    nets = []
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields:
            nets.append(ipaddress.ip_interface(fields[fields.index("inet") + 1]).network)
    return nets


def remove_stale_bridges() -> None:
    """The bridges of test processes that died before removing theirs (a killed run): each
    names its owner's pid in its alias."""
    for link in Path("/sys/class/net").glob(f"{BRIDGE_PREFIX}*"):
        try:
            alias = (link / "ifalias").read_text().strip()
        except OSError:
            continue
        if alias.startswith(OWNER_ALIAS) and alias[len(OWNER_ALIAS) :].isdigit():
            if not pid_alive(int(alias[len(OWNER_ALIAS) :])):
                subprocess.run(["ip", "link", "del", link.name], capture_output=True, timeout=10)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def make_bridge(name: str) -> ipaddress.IPv4Network:
    """A bridge `name` with the first /24 of SUBNETS that no interface of this host is on."""
    BRIDGE_LOCK.touch(exist_ok=True)
    with open(BRIDGE_LOCK) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        remove_stale_bridges()
        used = networks_in_use()
        for net in SUBNETS.subnets(new_prefix=24):
            if not any(net.overlaps(other) for other in used):
                gateway = f"{next(net.hosts())}/{net.prefixlen}"
                subprocess.run(["ip", "link", "add", name, "type", "bridge"], check=True, timeout=10)
                subprocess.run(
                    ["ip", "link", "set", name, "alias", f"{OWNER_ALIAS}{os.getpid()}"], check=True, timeout=10
                )
                subprocess.run(["ip", "addr", "add", gateway, "dev", name], check=True, timeout=10)
                subprocess.run(["ip", "link", "set", name, "up"], check=True, timeout=10)
                return net
    raise RuntimeError(f"no free /24 left in {SUBNETS} for an Engine 29 bridge")


class Engine29:
    """One Engine 29 under `root`: `.host` is its address (unix://root/docker.sock)."""

    def __init__(
        self,
        root: Path,
        image: str | None = "faden-test/busybox:1",
        socket: Path | None = None,
        path_prefix: Path | None = None,
    ):
        self.root = Path(root)
        self.path_prefix = path_prefix  # a folder searched first for dockerd's helpers
        self.image = image
        self.socket = socket or self.root / "docker.sock"
        self.host = f"unix://{self.socket}"
        self.bridge = f"{BRIDGE_PREFIX}{uuid.uuid4().hex[:10]}"  # 13 chars: Linux allows 15
        self.subnet: ipaddress.IPv4Network | None = None
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Engine29:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop the engine and remove its bridge."""
        try:
            self.stop()
        finally:
            self.remove_bridge()

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> Engine29:
        build = testtools.require(TOOL).parent
        why = missing_piece()
        if why:
            raise RuntimeError(f"no Docker Engine 29 for tests: {why}")
        self.root.mkdir(parents=True, exist_ok=True)
        if self.subnet is None:
            self.subnet = make_bridge(self.bridge)
        # No userland proxy: Docker 29's docker-proxy is not among the shared daemons (and
        # Debian's 20.10 one does not take its flags); a published port is still published.
        argv = ["bash", str(RUN_DOCKERD29), str(self.root), "--", "--userland-proxy=false"]
        if self.socket != self.root / "docker.sock":
            argv += ["-H", self.host]  # it listens on root's socket and on this one
        setpriv = shutil.which("setpriv")
        if setpriv:  # a test run that dies (killed, Ctrl-C) takes its engine with it
            argv = [setpriv, "--pdeathsig", "TERM", "--", *argv]
        env = {**with_path_prefix(self.path_prefix), "BRIDGE": self.bridge, "DOCKER29_BIN": str(build)}
        with open(self.root / "run.log", "ab") as log:
            self.proc = subprocess.Popen(
                argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        self.wait_ready(timeout_s)
        if self.image:
            self.load(self.image)
        return self

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"Engine 29 exited with {self.proc.returncode}: {self.log_tail()}")
            if self.pings():
                return
            time.sleep(0.2)
        raise RuntimeError(f"Engine 29 did not answer /_ping within {timeout_s}s: {self.log_tail()}")

    def pings(self) -> bool:
        result = subprocess.run(
            ["curl", "-fsS", "--max-time", "2", "--unix-socket", str(self.socket), "http://d/_ping"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return result.returncode == 0 and result.stdout.strip() == "OK"

    def client(self, timeout_s: float = 60.0) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.host, version="auto", timeout=timeout_s)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def docker(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """The machine's docker CLI (20.10, API 1.41 by default) at API 1.44, which this engine takes."""
        return docker_cli(self.host, *args, check=check, api_version=CLI_API_VERSION)

    def load(self, image: str) -> None:
        """Copy `image` from the shared 20.10 engine: docker save there, load here."""
        saved = subprocess.run(
            ["docker", "-H", HOST_ENGINE, "save", image],
            capture_output=True,
            check=True,
            timeout=120,
            env={k: v for k, v in os.environ.items() if k != "DOCKER_API_VERSION"},
        ).stdout
        with closing(self.client()) as client:
            client.images.load(saved)
            client.images.get(image)  # raises when the load did not name it

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Remove every container, then SIGTERM the script (it stops dockerd, then containerd)."""
        if self.proc is None:
            return
        if self.proc.poll() is None and self.pings():
            try:
                with closing(self.client(timeout_s=30)) as client:
                    for container in client.containers.list(all=True):
                        container.remove(force=True)
            except docker.errors.DockerException:
                pass  # stopping it is what matters; its data dir goes with the test's tmp dir
        self.proc.send_signal(signal.SIGTERM)  # the script's trap: dockerd first, then containerd
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def remove_bridge(self) -> None:
        if self.subnet is not None:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=10)
            self.subnet = None

    def log_tail(self, lines: int = 20) -> str:
        text = ""
        for name in ("run.log", "dockerd.log", "containerd.log"):
            path = self.root / name
            if path.exists():
                text += f"\n--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        return text
