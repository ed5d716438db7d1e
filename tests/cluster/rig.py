"""The cluster rig: N machines on this one host, each as real as the host allows.

    machine i (1..N): network namespace `faden-m<i>`, interface eth0 = 198.18.0.(10+i)/24,
                      joined by a veth pair to the bridge `fadenbr0` (198.18.0.1) in the root
                      namespace; no default route, so nothing leaves 198.18.0.0/24;
                      its own dockerd (own data root, exec root, pidfile, socket;
                      --bridge=none --iptables=false) started inside the namespace, holding
                      the test image (docker save | docker load);
                      its own agent (own state, runtime dir, agent id, ADVERTISE_HOST = its
                      address) enrolled with the one reference backend on 198.18.0.1.
    links:            shape(i, rate_mbit=, delay_ms=, to=): tc tbf for rates; tc netem for
                      delay where the kernel has it, else a userspace delay line
                      (delayline.py), optionally for the traffic to one address only.

One rig at a time on a host (the addresses and names are fixed): a lock file serialises
them, and a start first removes whatever a killed earlier rig left (names are ours). stop()
removes every namespace, engine, process and directory it made; it never raises.

By hand: tests/infra/cluster-rig.sh (docs/cluster-rig.md).
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faden_agent.config import VARIABLES
from tests.support.agentproc import AgentProcess, agent_env, wait_for
from tests.support.privateengine import dockerd_argv

log = logging.getLogger(__name__)
# agent_env gives each test agent a free peer port; a rig machine keeps the product's default
PRODUCT_PEER_PORT = next(var.default for var in VARIABLES if var.field == "peer_port")

SUBNET = "198.18.0"
BRIDGE = "fadenbr0"
BRIDGE_ADDRESS = f"{SUBNET}.1"
NETNS_PREFIX = "faden-m"
HOST_VETH_PREFIX = "fdnh"  # root-namespace end of machine i's link: fdnh<i>
LOCK_PATH = Path("/run/faden-cluster-rig.lock")
DIR_PREFIX = "faden-rig-"  # under /tmp: short, so unix socket paths stay below 108 bytes
TEST_IMAGE = "faden-test/busybox:1"
FORWARD_RULE = ("-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT")


def run(
    argv: list[str], *, check: bool = True, timeout: float = 60, input: bytes | None = None
) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, timeout=timeout, input=input)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.decode(errors='replace')[:300]}")
    return done


def address_of(index: int) -> str:
    return f"{SUBNET}.{10 + index}"


@dataclass
class Machine:
    index: int
    root: Path

    netns: str = field(init=False)
    address: str = field(init=False)
    host_veth: str = field(init=False)
    dockerd: subprocess.Popen | None = None
    agent: AgentProcess | None = None
    node: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.netns = f"{NETNS_PREFIX}{self.index}"
        self.address = address_of(self.index)
        self.host_veth = f"{HOST_VETH_PREFIX}{self.index}"

    @property
    def docker_host(self) -> str:
        return f"unix://{self.root}/docker.sock"

    @property
    def node_id(self) -> str:
        assert self.node is not None, f"machine {self.index} has no enrolled agent"
        return self.node["node_id"]

    def argv(self, *argv: str) -> list[str]:
        """argv run inside this machine's network namespace."""
        return ["ip", "netns", "exec", self.netns, *argv]

    def run(self, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        return run(self.argv(*argv), check=check, timeout=timeout)

    def popen(self, *argv: str, **kwargs: Any) -> subprocess.Popen:
        return subprocess.Popen(self.argv(*argv), **kwargs)

    def nsenter_argv(self, *argv: str) -> list[str]:
        """argv in this machine's network namespace only: `ip netns exec` also mounts a
        fresh /sys, which hides the cgroup mounts dockerd needs."""
        return ["nsenter", f"--net=/run/netns/{self.netns}", *argv]

    def docker(
        self, *args: str, check: bool = True, timeout: float = 120, input: bytes | None = None
    ) -> subprocess.CompletedProcess:
        return run(["docker", "-H", self.docker_host, *args], check=check, timeout=timeout, input=input)


class Rig:
    def __init__(
        self,
        machines: int = 3,
        *,
        docker: bool = True,
        agents: bool = True,
        agent_settings: dict[str, Any] | None = None,
        base_dir: Path | None = None,
        agent_argv: dict[int, tuple[list[str], dict[str, str]]] | None = None,
    ):
        """agent_settings: FADEN_NODE_AGENT_* values (a callable value is called with the
        Machine); agent_argv: machine index -> (argv, extra environment) of another build."""
        if not 1 <= machines <= 200:
            raise ValueError("machines must be 1..200")
        self.count = machines
        self.with_docker = docker
        self.with_agents = agents
        self.agent_settings = agent_settings or {}
        self.agent_argv = agent_argv or {}
        self.base_dir = base_dir
        self.machines: list[Machine] = []
        self.backend = None  # tests.support.backendproc.BackendProcess
        self._lock_fd: int | None = None
        self._delay_lines: dict[int, Any] = {}

    # ------------------------------------------------------------------ start

    def start(self) -> Rig:
        self._lock()
        try:
            remove_leftovers()
            self.base_dir = self.base_dir or Path(tempfile.mkdtemp(prefix=DIR_PREFIX, dir="/tmp"))
            self.machines = [Machine(i, self.base_dir / f"m{i}") for i in range(1, self.count + 1)]
            self._make_bridge()
            for machine in self.machines:
                machine.root.mkdir(parents=True)
                self._make_namespace(machine)
            if self.with_docker:
                image = run(["docker", "save", TEST_IMAGE], timeout=120).stdout
                for machine in self.machines:
                    self._start_dockerd(machine)
                for machine in self.machines:
                    self._wait_dockerd(machine)
                    machine.docker("load", input=image)
            if self.with_agents:
                self.start_backend()
                for machine in self.machines:
                    self.start_agent(machine)
                for machine in self.machines:
                    self.wait_agent(machine)
        except BaseException:
            self.stop()
            raise
        return self

    def _lock(self) -> None:
        self._lock_fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + 600
        while True:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"another cluster rig holds {LOCK_PATH} for 10 minutes") from None
                time.sleep(1)

    def _make_bridge(self) -> None:
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        run(["ip", "addr", "add", f"{BRIDGE_ADDRESS}/24", "dev", BRIDGE])
        run(["ip", "link", "set", BRIDGE, "up"])
        if shutil.which("iptables"):
            # Docker's FORWARD policy is DROP, and br_netfilter hands bridged frames to it.
            run(["iptables", "-I", "FORWARD", "1", *FORWARD_RULE])

    def _make_namespace(self, machine: Machine) -> None:
        ns = machine.netns
        run(["ip", "netns", "add", ns])
        run(["ip", "link", "add", machine.host_veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
        run(["ip", "link", "set", machine.host_veth, "master", BRIDGE])
        run(["ip", "link", "set", machine.host_veth, "up"])
        machine.run("ip", "addr", "add", f"{machine.address}/24", "dev", "eth0")
        machine.run("ip", "link", "set", "eth0", "up")
        machine.run("ip", "link", "set", "lo", "up")

    def _start_dockerd(self, machine: Machine) -> None:
        root = machine.root
        log_file = open(root / "dockerd.log", "ab")
        machine.dockerd = subprocess.Popen(
            machine.nsenter_argv(*dockerd_argv(root, root / "docker", machine.docker_host)),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log_file.close()

    def _wait_dockerd(self, machine: Machine) -> None:
        def answers() -> bool:
            if machine.dockerd is not None and machine.dockerd.poll() is not None:
                tail = (machine.root / "dockerd.log").read_text(errors="replace")[-1500:]
                raise AssertionError(f"dockerd of machine {machine.index} exited: {tail}")
            return machine.docker("version", check=False, timeout=30).returncode == 0

        wait_for(answers, 90, interval_s=0.5, what=f"dockerd of machine {machine.index}")

    def start_backend(self) -> None:
        from tests.support.backendproc import BackendProcess

        assert self.base_dir is not None
        self.backend = BackendProcess(self.base_dir / "backend", self.base_dir / "backend.log", host=BRIDGE_ADDRESS)
        self.backend.start()

    def agent_env(self, machine: Machine, **overrides: Any) -> dict[str, str]:
        assert self.backend is not None
        settings: dict[str, Any] = {
            "backend_url": self.backend.url,
            "enrollment_token": self.backend.mint_token(),
            "agent_id": f"rig-m{machine.index}",
            "host": machine.address,
            "advertise_host": machine.address,
            "heartbeat_interval_sec": 1,
            "stream_keepalive_sec": 0.5,
            "reconnect_min_sec": 0.2,
            "reconnect_max_sec": 1,
            "request_timeout_sec": 5,
            "disk_paths": str(machine.root),
            "peer_port": PRODUCT_PEER_PORT,  # a machine of its own: the port operators run
            **{k: v(machine) if callable(v) else v for k, v in self.agent_settings.items()},
            **overrides,
        }
        if self.with_docker:
            settings.setdefault("docker_host", machine.docker_host)
        return agent_env(machine.root / "agent", **settings)

    def start_agent(self, machine: Machine, **overrides: Any) -> AgentProcess:
        (machine.root / "agent").mkdir(exist_ok=True)
        env = self.agent_env(machine, **overrides)
        argv, extra_env = self.agent_argv.get(machine.index, ([sys.executable, "-m", "faden_agent", "run"], {}))
        machine.agent = AgentProcess({**env, **extra_env}, machine.root / "agent.log", argv=machine.argv(*argv))
        machine.agent.start(wait_running=False)
        return machine.agent

    def wait_agent(self, machine: Machine, timeout_s: float = 60) -> dict[str, Any]:
        assert self.backend is not None and machine.agent is not None
        machine.agent.wait_all_running(timeout_s)
        machine.node = self.backend.wait_node(machine.agent.env["FADEN_NODE_AGENT_AGENT_ID"], timeout_s=timeout_s)
        return machine.node

    def machine(self, index: int) -> Machine:
        return self.machines[index - 1]

    # ------------------------------------------------------------------ links

    def shape(
        self, index: int, *, rate_mbit: float | None = None, delay_ms: float | None = None, to: str | None = None
    ) -> None:
        """Shape what machine `index` sends (its eth0 egress): a rate (tc tbf) and/or a delay
        (tc netem, else the userspace delay line), the delay optionally only towards `to`."""
        machine = self.machine(index)
        if rate_mbit is not None:
            machine.run(
                "tc",
                "qdisc",
                "replace",
                "dev",
                "eth0",
                "root",
                "tbf",
                "rate",
                f"{rate_mbit}mbit",
                "burst",
                "256kb",
                "latency",
                "100ms",
            )
        if delay_ms is not None:
            if netem_available() and to is None and rate_mbit is None:
                machine.run("tc", "qdisc", "replace", "dev", "eth0", "root", "netem", "delay", f"{delay_ms}ms")
            else:
                self._delay_line(machine, delay_ms, to)

    def unshape(self, index: int) -> None:
        machine = self.machine(index)
        machine.run("tc", "qdisc", "del", "dev", "eth0", "root", check=False)
        line = self._delay_lines.pop(index, None)
        if line is not None:
            line.remove()

    def _delay_line(self, machine: Machine, delay_ms: float, to: str | None) -> None:
        from tests.cluster.delayline import OFFLOADS, DelayLine

        old = self._delay_lines.pop(machine.index, None)
        if old is not None:
            old.remove()
        # The pump copies frames as the sender handed them over: a peer's or the host's
        # segmentation offload would give it frames larger than the MTU (EMSGSIZE on resend).
        # Off on every sender for the rest of this rig's life (one test).
        run(["ethtool", "-K", BRIDGE, *OFFLOADS])
        for other in self.machines:
            other.run("ethtool", "-K", "eth0", *OFFLOADS)
            run(["ethtool", "-K", other.host_veth, *OFFLOADS])
        self._delay_lines[machine.index] = DelayLine(machine, BRIDGE, delay_ms, to).insert()

    def link(self, index: int, up: bool) -> None:
        """Cut (or restore) machine `index`'s link to the bridge."""
        run(["ip", "link", "set", self.machine(index).host_veth, "up" if up else "down"])

    # ------------------------------------------------------------------ stop

    def stop(self) -> None:
        """Remove everything; never raises (it runs after failed tests too)."""
        for index in list(self._delay_lines):
            _quietly(self._delay_lines.pop(index).remove)
        # each machine's agent, then its engine, side by side: a few seconds each, in turn they
        # made most of a module's teardown
        with ThreadPoolExecutor(max(1, len(self.machines))) as pool:
            list(pool.map(_stop_agent, self.machines))
            if self.backend is not None:
                _quietly(self.backend.stop)
            list(pool.map(_stop_engine, self.machines))
        remove_leftovers()
        if self.base_dir is not None:
            _quietly(lambda: _remove_tree(self.base_dir))
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> Rig:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _quietly(action: Any) -> None:
    try:
        action()
    except Exception as exc:  # noqa: BLE001 - teardown goes on whatever fails
        log.warning("rig teardown: %s", exc)


def _stop_agent(machine: Machine) -> None:
    if machine.agent is not None:
        _quietly(machine.agent.stop)
        _quietly(machine.agent.kill)


def _stop_engine(machine: Machine) -> None:
    if machine.dockerd is not None:
        _quietly(lambda: _remove_containers(machine))
        _quietly(lambda: _stop_process(machine.dockerd, 20))


def _remove_containers(machine: Machine) -> None:
    ids = machine.docker("ps", "-aq", check=False, timeout=30).stdout.split()
    if ids:
        machine.docker("rm", "-f", *[i.decode() for i in ids], check=False, timeout=60)


def _stop_process(proc: subprocess.Popen | None, timeout_s: float) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def netem_available() -> bool:
    """Whether this kernel has the netem qdisc (not every one has: CONFIG_NET_SCH_NETEM)."""
    probe = "fdnprobe0"
    run(["ip", "link", "add", probe, "type", "dummy"], check=False)
    try:
        return run(["tc", "qdisc", "add", "dev", probe, "root", "netem", "delay", "1ms"], check=False).returncode == 0
    finally:
        run(["ip", "link", "del", probe], check=False)


def rig_namespaces() -> list[str]:
    out = run(["ip", "netns", "list"], check=False).stdout.decode()
    return [line.split()[0] for line in out.splitlines() if line.startswith(NETNS_PREFIX)]


def remove_leftovers() -> None:
    """Remove what a rig (this one, or one killed before it could clean up) left: every
    process in a rig namespace, the namespaces, links, the bridge, and rig directories.
    Safe only under the rig lock: the names are the rig's own."""
    for ns in rig_namespaces():
        _kill(lambda ns=ns: [int(p) for p in run(["ip", "netns", "pids", ns], check=False).stdout.split()])
        run(["ip", "netns", "del", ns], check=False)
    _kill(_processes_using_rig_dirs)  # the backend and agents in the root namespace
    links = run(["ip", "-o", "link", "show"], check=False).stdout.decode()
    for line in links.splitlines():
        name = line.split(":", 2)[1].strip().split("@")[0]
        if name == BRIDGE or name.startswith((HOST_VETH_PREFIX, "fdnd", "fdnb")):
            run(["ip", "link", "del", name], check=False)
    while shutil.which("iptables") and run(["iptables", "-D", "FORWARD", *FORWARD_RULE], check=False).returncode == 0:
        pass
    for leftover in Path("/tmp").glob(DIR_PREFIX + "*"):
        _remove_tree(leftover)


def _processes_using_rig_dirs() -> list[int]:
    """Processes whose command line names a rig directory: started by a rig, by construction."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if f"/tmp/{DIR_PREFIX}".encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def _kill(list_pids: Any) -> None:
    """SIGTERM, then SIGKILL, each process `list_pids()` names (all of them the rig's own)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = list_pids()
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if _alive(p)]
            time.sleep(0.2)
        if not pids:
            return


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _remove_tree(path: Path) -> None:
    """Unmount whatever an engine left mounted below `path`, then delete it."""
    with open("/proc/self/mounts") as fh:
        mounts = [line.split()[1] for line in fh]
    for mount in sorted((m for m in mounts if m.startswith(str(path) + "/")), key=len, reverse=True):
        run(["umount", "-l", mount], check=False)
    shutil.rmtree(path, ignore_errors=True)


def main(argv: list[str]) -> int:
    """`python3 -m tests.cluster.rig up [N]`: start N machines and hold them until Ctrl-C;
    `... down`: remove what a killed rig left."""
    import argparse

    parser = argparse.ArgumentParser(prog="cluster-rig")
    sub = parser.add_subparsers(dest="action", required=True)
    up = sub.add_parser("up", help="start a rig and keep it until Ctrl-C or SIGTERM")
    up.add_argument("machines", type=int, nargs="?", default=3)
    up.add_argument("--no-agents", action="store_true", help="namespaces and engines only")
    sub.add_parser("down", help="remove a killed rig's leftovers")
    args = parser.parse_args(argv)
    if args.action == "down":
        remove_leftovers()
        return 0
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    rig = Rig(args.machines, agents=not args.no_agents)
    with rig:
        print(f"rig up in {rig.base_dir}")
        if rig.backend is not None:
            print(f"backend: {rig.backend.url}   (admin token in {rig.base_dir}/admin.env)")
            env_file = rig.base_dir / "admin.env"
            env_file.write_text(
                f"FADEN_NODE_AGENT_BACKEND_URL={rig.backend.url}\nFADEN_ADMIN_TOKEN={rig.backend.admin_token}\n"
            )
            env_file.chmod(0o600)
        for machine in rig.machines:
            node = machine.node["node_id"] if machine.node else "-"
            print(
                f"machine {machine.index}: netns {machine.netns}  {machine.address}  "
                f"DOCKER_HOST={machine.docker_host}  node {node}"
            )
        print("Ctrl-C tears it all down.", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print("tearing down", flush=True)
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    sys.exit(main(sys.argv[1:]))
