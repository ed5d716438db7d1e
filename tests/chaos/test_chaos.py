"""The chaos run: the whole agent under its supervisor, against the reference
backend, the real Docker engine and registry, a journal file being appended to and a
Loki-compatible receiver, while seeded faults hit every part. Invariants are checked at
the end, each with its own message.

    FADEN_CHAOS_SEED=1234 FADEN_CHAOS_SECONDS=600 pytest -m serial tests/chaos -s
    FADEN_CHAOS_SEED=random ...     a fresh seed, printed

The seed is printed (and named in every failure) so a run can be replayed. A few minutes
by default; FADEN_CHAOS_SECONDS asks for longer. Faults include hostile peers, a registry
that drips its answers and a tenant's hostile Ray log tree.
"""

from __future__ import annotations

import collections
import itertools
import os
import random
import re
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import psutil
import pytest

from faden_agent import protocol
from faden_agent.backend.outbox import Outbox
from faden_agent.transfers.tickets import TICKET_DIR
from faden_agent.transfers.wire import PeerFailure
from tests.conftest import TEST_IMAGE
from tests.support import hostilepeer
from tests.support.agentproc import AgentProcess, pid_alive, wait_for
from tests.support.backendproc import BackendProcess, agent_env_for, free_port
from tests.support.dockerd import restart_dockerd, sigcont_dockerd, sigstop_dockerd
from tests.support.hostileregistry import DrippingRegistry
from tests.support.journalfiles import JournalWriter
from tests.support.lokireceiver import LokiReceiver
from tests.support.peerreceiver import SlowReceiver, fetch_archive_members, serve_ticket

pytestmark = [pytest.mark.docker, pytest.mark.serial]

# A fixed default keeps CI's run the same faults in the same order; "random" explores.
_seed = os.environ.get("FADEN_CHAOS_SEED", "20261129")
SEED = random.SystemRandom().randrange(2**31) if _seed == "random" else int(_seed)
DURATION_S = float(os.environ.get("FADEN_CHAOS_SECONDS", "150"))
HEARTBEAT_S = 1.0
HANG_TIMEOUT_S = 3.0
RECONNECT_MAX_S = 2.0
WORKERS = ("stream", "executor", "inventory", "logs")
# Faults during which the backend cannot hear heartbeats; gaps then are excused but bounded.
HEARTBEAT_FAULTS = {
    "kill_stream",
    "stop_stream",
    "kill_agent",
    "backend_restart",
    "backend_503",
    "rotate_credential",
    "state_disk_full",
}
EXCUSED_GAP_SLACK_S = HANG_TIMEOUT_S + RECONNECT_MAX_S + 6.0
MEMORY_BOUND_MIB = 700  # PSS of the whole agent tree (supervisor, workers, journalctl)
# The image the peer worker serves when it is killed: larger than every socket buffer between
# it and a receiver reading slowly, so the kill lands mid-transfer.
SERVED_PAYLOAD_BYTES = 32 << 20
HOSTILE_MODES = ("drip", "lying_size", "redirect", "another_image", "endless")
HOSTILE_DEADLINE_S = {"drip": 10}  # a drip is cut by the deadline; the others move on to the honest peer
FETCH_DEADLINE_S = 30
DEADLINE_SLACK_S = 3.0
HONEST_PULL_START_S = 5.0  # an honest pull beside three dripping ones (0.11 s when measured alone)


@dataclass
class Fault:
    kind: str
    start: float
    end: float = 0.0


@dataclass
class Chaos:
    """Everything the run did, for the invariants and the closing report."""

    commands: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    journal_markers: list[str] = field(default_factory=list)
    creates: collections.Counter = field(default_factory=collections.Counter)
    peer_kills: list[dict[str, Any]] = field(default_factory=list)
    hostile_fetches: list[dict[str, Any]] = field(default_factory=list)
    hostile_registries: list[dict[str, Any]] = field(default_factory=list)
    tenant_trees: list[dict[str, Any]] = field(default_factory=list)
    peak_pss_mib: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, message: str) -> None:
        pytest.fail(f"[chaos seed={SEED}] {message}", pytrace=False)


def image_present(client: docker.DockerClient, image_id: str) -> bool:
    try:
        client.images.get(image_id)
        return True
    except docker.errors.ImageNotFound:
        return False


def tree_pss_mib(root_pid: int) -> float:
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total / 2**20


class Run:
    def __init__(self, tmp_path: Path, registry: str):
        self.tmp = tmp_path
        self.registry = registry
        self.tag = f"chaos{SEED % 100000}"
        self.chaos = Chaos()
        self.stop = threading.Event()
        self.backend = BackendProcess(tmp_path / "backend-data", tmp_path / "backend.log", keepalive_sec=0.5)
        self.loki = LokiReceiver(version="3")  # takes structured metadata: lines arrive as read
        self.journal = JournalWriter(tmp_path / "journal")
        self.agent: AgentProcess | None = None
        self.node_id = ""
        self.agent_lock = threading.Lock()  # the agent object is replaced on a whole-agent kill
        self.statefs: Path | None = None  # the state directory's own small file system (root only)
        self.peer_port = free_port()
        self.docker = docker.from_env(timeout=60)
        self.own_images: list[str] = []  # made for this run, removed at its end

    # ------------------------------------------------------------------ set-up

    def start(self) -> None:
        self.make_images()
        self.backend.start()
        self.loki.start()
        self.append_journal(5)
        state: dict[str, Any] = {}
        if os.geteuid() == 0:  # a tmpfs of its own, so the disk-full fault hits the state dir alone
            self.statefs = self.tmp / "statefs"
            self.statefs.mkdir()
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=128m,mode=0700", "tmpfs", str(self.statefs)], check=True
            )
            state["state_path"] = self.statefs / "state" / "state.json"
        env = agent_env_for(
            self.backend,
            self.tmp / "agent",
            heartbeat_interval_sec=HEARTBEAT_S,
            reconnect_max_sec=RECONNECT_MAX_S,
            reconnect_min_sec=0.2,
            worker_liveness_sec=0.5,
            worker_hang_timeout_sec=HANG_TIMEOUT_S,
            restart_max=1000,
            restart_window_sec=30,
            restart_backoff_max_sec=2,
            docker_timeout_sec=8,
            request_timeout_sec=5,
            loki_url=self.loki.url,
            journal_directory=self.tmp / "journal",
            log_flush_interval_sec=0.5,
            inventory_interval_sec=5,
            log_level="info",
            advertise_host="127.0.0.1",
            peer_port=self.peer_port,
            **state,
        )
        (self.tmp / "agent").mkdir(exist_ok=True)
        self.env = env
        self.agent = AgentProcess(env, self.tmp / "agent.log").start()
        self.agent_id = env["FADEN_NODE_AGENT_AGENT_ID"]
        self.node_id = self.backend.wait_node(self.agent_id, heartbeats=1)["node_id"]

    def make_images(self) -> None:
        """The peer faults' images: one the agent serves, one it must fetch (off the engine),
        and a decoy a hostile peer sends in its place (never loaded)."""
        _, self.served_id = hostilepeer.make_image(self.docker, SERVED_PAYLOAD_BYTES)
        self.wanted_id, self.wanted_archive = hostilepeer.absent_image(self.docker)
        self.decoy_id, self.decoy_archive = hostilepeer.absent_image(self.docker)
        self.own_images += [self.served_id, self.wanted_id, self.decoy_id]

    def close(self) -> None:
        self.stop.set()
        try:
            sigcont_dockerd()
        except AssertionError:
            pass
        if self.agent:
            self.agent.stop()
            self.agent.kill()
        self.backend.stop()
        self.loki.stop()
        if self.statefs is not None:
            subprocess.run(["umount", "-l", str(self.statefs)], check=False)
        client = docker.from_env(timeout=60)
        for container in client.containers.list(
            all=True, filters={"label": f"{protocol.LABEL_AGENT_ID}={self.agent_id}"}
        ):
            container.remove(force=True)
        for image_id in self.own_images:
            hostilepeer.remove_image(client, image_id)

    # ------------------------------------------------------------------ workload

    def append_journal(self, count: int) -> None:
        markers = [f"chaos-journal-{self.tag}-{len(self.chaos.journal_markers) + i}" for i in range(count)]
        self.journal.append(self.journal.lines(markers, SYSLOG_IDENTIFIER="chaos"))
        self.chaos.journal_markers.extend(markers)

    def send(self, kind: str, spec: dict[str, Any]) -> str | None:
        command_id = f"{self.tag}-{len(self.chaos.commands)}-{uuid.uuid4().hex[:6]}"
        try:
            self.backend.send_command(self.node_id, kind, spec, command_id=command_id)
        except Exception:  # noqa: BLE001 - the backend may be down right now: not sent, not counted
            return None
        self.chaos.commands[command_id] = (kind, spec)
        return command_id

    def workload(self, rng: random.Random) -> None:
        slots = [f"{self.tag}-c{i}" for i in range(4)]
        images = [TEST_IMAGE, f"{self.registry}/faden/busybox:1", f"{self.registry}/faden/busybox:2"]
        recent: list[str] = []
        step = 0
        while not self.stop.is_set():
            step += 1
            name = rng.choice(slots)
            action = rng.choices(
                ["run", "stop", "start", "restart", "remove", "pull", "cancel"], [5, 2, 2, 1, 2, 2, 1]
            )[0]
            if action == "run":
                script = (
                    f"echo chaos-line {name} start $(date +%s%N); "
                    f"i=0; while true; do i=$((i+1)); echo chaos-line {name} $i; sleep 1; done"
                )
                cid = self.send(
                    "container.run",
                    {
                        "name": name,
                        "image": rng.choice(images),
                        "command": ["sh", "-c", script],
                        "replace": rng.random() < 0.5,
                        "cluster": "chaos",
                        "deadline_s": 40,
                    },
                )
            elif action == "pull":
                cid = self.send("image.pull", {"image": rng.choice(images[1:]), "deadline_s": 40})
            elif action == "cancel" and recent:
                cid = self.send("command.cancel", {"command_id": rng.choice(recent[-4:])})
            elif action in ("stop", "start", "restart", "remove"):
                spec: dict[str, Any] = {"name": name}
                if action == "stop":
                    spec["timeout_s"] = 1
                if action == "remove":
                    spec["force"] = True
                cid = self.send(f"container.{action}", spec)
            else:
                cid = None
            if cid:
                recent.append(cid)
            if step % 2 == 0:
                self.append_journal(10)
            self.stop.wait(rng.uniform(0.3, 1.2))

    def watch_creates(self) -> None:
        """Count Docker's create events per command id: a command runs at most once."""
        since = time.time() - 1
        while not self.stop.is_set():
            try:
                client = docker.from_env(timeout=5)
                stream = client.events(
                    since=since,
                    decode=True,
                    filters={
                        "type": "container",
                        "event": "create",
                        "label": f"{protocol.LABEL_AGENT_ID}={self.agent_id}",
                    },
                )
                for event in stream:
                    since = event.get("time", since)
                    command_id = event.get("Actor", {}).get("Attributes", {}).get(protocol.LABEL_COMMAND_ID)
                    with self.chaos.lock:
                        self.chaos.creates[command_id] += 1
                    if self.stop.is_set():
                        break
            except Exception:  # noqa: BLE001 - engine stopped/restarting: reconnect from `since`
                self.stop.wait(0.5)

    def watch_memory(self) -> None:
        while not self.stop.wait(2):
            agent = self.agent
            if agent and agent.proc and agent.proc.poll() is None:
                self.chaos.peak_pss_mib = max(self.chaos.peak_pss_mib, tree_pss_mib(agent.pid))

    # ------------------------------------------------------------------ faults

    def faults(self, rng: random.Random, until: float) -> None:
        """First every fault once (each worker killed and stopped, each hostile peer), in seeded
        order; then at random."""
        plan: list[tuple[Callable[..., None], tuple[Any, ...]]] = [
            *[(self.kill_worker, (name,)) for name in WORKERS],
            *[(self.stop_worker, (name,)) for name in WORKERS],
            *[
                (fault, ())
                for fault in (
                    self.kill_agent,
                    self.backend_restart,
                    self.backend_503,
                    self.stall_stream,
                    self.loki_down,
                    self.loki_429,
                    self.dockerd_stop,
                    self.dockerd_restart,
                    self.rotate_credential,
                    self.state_disk_full,
                    self.kill_peer_mid_transfer,
                    self.hostile_registry,
                    self.hostile_tenant_tree,
                )
            ],
            *[(self.hostile_peer_fetch, (mode,)) for mode in HOSTILE_MODES],
        ]
        everything = list(plan)
        # worker faults are cheap: more of them; the hostile peers together weigh as one fault
        singles = [1, 1, 1, 1, 1, 1, 1, 0.4, 1, 1, 1, 0.5, 0.5]  # the hostile registry and tree cost ~15 s
        weights = [3] * 8 + singles + [1 / len(HOSTILE_MODES)] * len(HOSTILE_MODES)
        rng.shuffle(plan)
        while (plan or time.monotonic() < until) and not self.stop.is_set():  # every fault runs once
            fault, args = plan.pop() if plan else rng.choices(everything, weights)[0]
            fault(*args, rng)
            self.stop.wait(rng.uniform(1.0, 4.0))

    def worker_row(self, name: str) -> dict[str, Any] | None:
        """The worker's row of `ps` (asked again while the supervisor is slow to answer)."""
        try:
            return wait_for(lambda: self.agent.workers().get(name), 10, interval_s=0.2, what=f"the {name} row of ps")
        except AssertionError:
            return None

    def _window(self, kind: str) -> Fault:
        fault = Fault(kind, time.time())
        self.chaos.faults.append(fault)
        return fault

    def kill_worker(self, name: str, rng: random.Random) -> None:
        row = self.agent.workers().get(name) if self.agent else None
        if row and row["pid"]:
            fault = self._window("kill_stream" if name == "stream" else f"kill_{name}")
            os.kill(row["pid"], signal.SIGKILL)
            fault.end = time.time() + 1

    def stop_worker(self, name: str, rng: random.Random) -> None:
        row = self.agent.workers().get(name) if self.agent else None
        if not row or not row["pid"]:
            return
        fault = self._window("stop_stream" if name == "stream" else f"stop_{name}")
        os.kill(row["pid"], signal.SIGSTOP)
        self.stop.wait(rng.uniform(0.5, HANG_TIMEOUT_S + 2))  # past the hang timeout: replaced
        if pid_alive(row["pid"]):
            os.kill(row["pid"], signal.SIGCONT)
        fault.end = time.time()

    def kill_agent(self, rng: random.Random) -> None:
        fault = self._window("kill_agent")
        with self.agent_lock:
            old = self.agent
            os.kill(old.pid, signal.SIGKILL)  # the supervisor only: its workers must die with it
            old.proc.wait(10)
            self.stop.wait(rng.uniform(0.2, 2.0))
            self.agent = AgentProcess(self.env, self.tmp / "agent.log").start(timeout_s=40)
        fault.end = time.time()

    def backend_restart(self, rng: random.Random) -> None:
        fault = self._window("backend_restart")
        self.backend.restart(down_s=rng.uniform(0.0, 3.0))
        fault.end = time.time()

    def backend_503(self, rng: random.Random) -> None:
        fault = self._window("backend_503")
        self.backend.admin.faults(maintenance_retry_after=rng.randint(1, 3))
        self.stop.wait(rng.uniform(1.0, 5.0))
        self.backend.admin.faults(maintenance_retry_after=None)
        fault.end = time.time()

    def rotate_credential(self, rng: random.Random) -> None:
        """The backend rotates the node's credential mid-run: the stream worker rewrites the
        state file and restarts; nothing may be lost or run twice across it."""
        fault = self._window("rotate_credential")
        self.backend.admin.rotate_credential(self.node_id)
        self.stop.wait(rng.uniform(1.0, 3.0))
        fault.end = time.time()

    def state_disk_full(self, rng: random.Random) -> None:
        """The state directory's file system fills up (outbox, journal, state file) for a
        while, then is freed: nothing may be lost or run twice across it (root only)."""
        if self.statefs is None:
            return
        fault = self._window("state_disk_full")
        ballast = self.statefs / "ballast"
        with open(ballast, "wb", buffering=0) as fh:
            try:
                while True:
                    fh.write(b"\0" * 65536)
            except OSError:
                pass  # ENOSPC: full
        self.stop.wait(rng.uniform(1.0, 4.0))
        ballast.unlink()
        fault.end = time.time()

    def kill_peer_mid_transfer(self, rng: random.Random) -> None:
        """The backend has the agent serve an image; a receiver (this test) reads it slowly and
        the peer worker is SIGKILLed part-way: the receiver sees a cut stream, the worker
        comes back (checked at the end, with a whole serve and fetch of the same image)."""
        row = self.agent.workers().get("peer") if self.agent else None
        if not row or not row["pid"] or not (row.get("status") or {}).get("listening"):
            return
        fault = self._window("kill_peer")
        kill: dict[str, Any] = {"pid": row["pid"], "at": time.strftime("%H:%M:%S")}
        self.chaos.peer_kills.append(kill)
        ticket = f"chaos-kill-{uuid.uuid4().hex}"
        try:
            serve_ticket(self.backend, self.node_id, self.served_id, ticket)
            receiver = SlowReceiver(self.peer_port, self.served_id, ticket)
        except (AssertionError, OSError, PeerFailure) as exc:
            kill["error"] = f"could not start the transfer: {type(exc).__name__}: {str(exc)[:300]}"
            fault.end = time.time()
            return
        try:
            if receiver.status != 200:
                kill["error"] = f"the peer port answered HTTP {receiver.status}"
                return
            receiver.read(rng.randint(64 << 10, 4 << 20))
            kill["transfers_active"] = wait_for(
                lambda: ((self.agent.workers().get("peer") or {}).get("status") or {}).get("transfers_active"),
                5,
                interval_s=0.1,
                what="the peer worker to report the transfer",
            )
            os.kill(row["pid"], signal.SIGKILL)
            kill["receiver"] = receiver.rest()
            kill["received"] = receiver.received
        except (AssertionError, OSError) as exc:
            kill.setdefault("error", f"{type(exc).__name__}: {str(exc)[:300]}")
        finally:
            receiver.close()
            fault.end = time.time()

    def hostile_peer_fetch(self, mode: str, rng: random.Random) -> None:
        """The agent fetches an image it lacks, the first peer hostile (`mode`), the second
        honest: the command ends within its deadline, through the honest peer (a drip: at the
        deadline), the executor lives, nothing else reaches the engine."""
        wanted, archive = self.wanted_id, self.wanted_archive
        good = hostilepeer.scripted(hostilepeer.honest(wanted, archive))
        target = hostilepeer.scripted(hostilepeer.honest(wanted, archive))  # where a redirect points
        script = {
            "drip": lambda: hostilepeer.drip(wanted),
            "lying_size": lambda: hostilepeer.claims_a_petabyte(wanted),
            "redirect": lambda: hostilepeer.redirect_to(target),
            "another_image": lambda: hostilepeer.honest(wanted, self.decoy_archive),  # named as the wanted one
            "endless": lambda: hostilepeer.endless(wanted),
        }[mode]()
        hostile = hostilepeer.scripted(script)
        fault = self._window("hostile_peer")
        deadline_s = HOSTILE_DEADLINE_S.get(mode, FETCH_DEADLINE_S)
        record: dict[str, Any] = {"mode": mode, "deadline_s": deadline_s, "good": good.url, "hostile": hostile.url}
        self.chaos.hostile_fetches.append(record)
        try:
            hostilepeer.remove_image(self.docker, wanted)  # a fetch before this one brought it
            record["executor_before"] = self.worker_row("executor")
            peers = [{"address": peer.url, "ticket": f"chaos-{uuid.uuid4().hex}"} for peer in (hostile, good)]
            spec = {"image_id": wanted, "peers": peers, "size_bytes": len(archive), "deadline_s": deadline_s}
            cid = self.send("image.fetch", spec)
            if cid is None:
                record["error"] = "the backend did not take the command"
                return
            record["command_id"] = cid
            try:
                self.backend.wait_command(cid, timeout_s=deadline_s + 30)
            except AssertionError:
                record["error"] = f"still {self.backend.command(cid)['state']} {deadline_s + 30} s after it was sent"
                return
            record["executor_after"] = self.worker_row("executor")
            record["wanted_on_engine"] = image_present(self.docker, wanted)
            record["decoy_on_engine"] = image_present(self.docker, self.decoy_id)
            record["redirected_to"] = target.requests
        finally:
            for peer in (hostile, good, target):
                peer.close()
            fault.end = time.time()

    def hostile_registry(self, rng: random.Random) -> None:
        """Three pulls from a registry that drips its answer heads, then an honest one: the
        honest pull starts at once (the size checks hold no pull slot), every pull ends by
        its deadline, the executor lives."""
        fault = self._window("hostile_registry")
        registry = DrippingRegistry()
        record: dict[str, Any] = {"hostile": [], "executor_before": self.worker_row("executor")}
        self.chaos.hostile_registries.append(record)
        try:
            for i in range(3):
                cid = self.send("image.pull", {"image": f"{registry.host}/chaos/drip:{i}", "deadline_s": 25})
                if cid:
                    record["hostile"].append(cid)
            self.stop.wait(1.0)
            record["honest"] = self.send("image.pull", {"image": f"{self.registry}/faden/busybox:1", "deadline_s": 40})
            if record["honest"]:
                try:
                    self.backend.wait_command(record["honest"], timeout_s=45)
                except AssertionError:
                    pass  # named by check_hostile_registries
            record["executor_after"] = self.worker_row("executor")
        finally:
            registry.close()
            fault.end = time.time()

    def hostile_tenant_tree(self, rng: random.Random) -> None:
        """A Ray container whose log directory holds a hostile tree (many sessions, a deep
        chain, a symlink to /, a FIFO) for a few seconds: the logs worker lives and its
        Ray reader follows the container; the container is then removed."""
        fault = self._window("hostile_tenant_tree")
        name = f"{self.tag}-tree"
        tree = (
            "cd /tmp/ray && for s in $(seq 200); do mkdir -p session_$s/logs; "
            "for f in 1 2 3 4 5; do echo x > session_$s/logs/w$f.log; done; done; "
            "d=deep; for i in $(seq 200); do d=$d/d; done; mkdir -p $d; "
            "ln -s / session_1/logs/root; mkfifo session_2/logs/fifo.log; sleep 300"
        )
        record: dict[str, Any] = {"logs_before": self.worker_row("logs")}
        self.chaos.tenant_trees.append(record)
        try:
            spec = {"name": name, "image": TEST_IMAGE, "command": ["sh", "-c", tree], "ray": True, "deadline_s": 40}
            record["run"] = self.send("container.run", spec)
            self.stop.wait(rng.uniform(3.0, 8.0))
            record["logs_after"] = self.worker_row("logs")
            record["remove"] = self.send("container.remove", {"name": name, "force": True})
            if record["remove"]:
                try:
                    self.backend.wait_command(record["remove"], timeout_s=60)
                except AssertionError:
                    pass  # check_tenant_trees names it
        finally:
            fault.end = time.time()

    def stall_stream(self, rng: random.Random) -> None:
        fault = self._window("stall_stream")
        self.backend.admin.faults(stall_streams=True, drop_streams=True)
        self.stop.wait(rng.uniform(2.0, 6.0))
        self.backend.admin.faults(stall_streams=False)
        fault.end = time.time()

    def loki_down(self, rng: random.Random) -> None:
        fault = self._window("loki_down")
        self.loki.down()
        self.stop.wait(rng.uniform(2.0, 8.0))
        self.loki.up()
        fault.end = time.time()

    def loki_429(self, rng: random.Random) -> None:
        fault = self._window("loki_429")
        self.loki.set_mode("throttle", retry_after=1)
        self.stop.wait(rng.uniform(2.0, 6.0))
        self.loki.set_mode("ok")
        fault.end = time.time()

    def dockerd_stop(self, rng: random.Random) -> None:
        fault = self._window("dockerd_stop")
        pid = sigstop_dockerd()
        try:
            self.stop.wait(rng.uniform(2.0, 10.0))
        finally:
            sigcont_dockerd(pid)
        fault.end = time.time()

    def dockerd_restart(self, rng: random.Random) -> None:
        fault = self._window("dockerd_restart")
        restart_dockerd(down_s=rng.uniform(0.0, 2.0))
        fault.end = time.time()


def test_chaos(tmp_path, docker_client, registry):
    print(f"\nchaos: seed={SEED} duration={DURATION_S:.0f}s (replay with FADEN_CHAOS_SEED={SEED})")
    run = Run(tmp_path, registry)
    started = time.monotonic()
    try:
        run.start()
        threads = [
            threading.Thread(target=run.workload, args=(random.Random(SEED + 1),), daemon=True),
            threading.Thread(target=run.watch_creates, daemon=True),
            threading.Thread(target=run.watch_memory, daemon=True),
        ]
        for thread in threads:
            thread.start()
        run.faults(random.Random(SEED + 2), until=time.monotonic() + DURATION_S)
        run.stop.set()
        for thread in threads[:1]:
            thread.join(30)
        settle_and_check(run)
    finally:
        run.close()
    print(f"chaos: finished in {time.monotonic() - started:.0f}s (seed={SEED})")


def settle_and_check(run: Run) -> None:
    chaos, backend = run.chaos, run.backend
    run.append_journal(5)  # lines written after the last fault must arrive too
    run.agent.wait_all_running(40)

    # 1. every command reached exactly one terminal state
    def all_terminal() -> bool:
        return all(backend.command(cid)["state"] in protocol.TERMINAL_STATES for cid in chaos.commands)

    try:
        wait_for(all_terminal, 180, interval_s=1, what="every command to reach a terminal state")
    except AssertionError:
        stuck = {
            cid: backend.command(cid)["state"]
            for cid in chaos.commands
            if backend.command(cid)["state"] not in protocol.TERMINAL_STATES
        }
        chaos.fail(f"{len(stuck)} command(s) never reached a terminal state: {dict(list(stuck.items())[:10])}")
    outcomes: collections.Counter = collections.Counter()
    for cid, (kind, _) in chaos.commands.items():
        timeline = backend.command(cid)["timeline"]
        terminal = [r for r in timeline if r["state"] in protocol.TERMINAL_STATES]
        if len(terminal) != 1:
            chaos.fail(f"command {cid} ({kind}) has {len(terminal)} terminal records: {[r['state'] for r in terminal]}")
        if timeline[0]["state"] not in (protocol.RECEIVED, protocol.REJECTED):
            chaos.fail(
                f"command {cid} ({kind}) timeline does not start with received: {[r['state'] for r in timeline]}"
            )
        if not terminal[0].get("reason") or not terminal[0].get("message"):
            chaos.fail(f"command {cid} terminal record lacks reason or message: {terminal[0]}")
        outcomes[f"{kind}:{terminal[0]['state']}:{terminal[0]['reason']}"] += 1

    # 2. ran at most once, and no duplicated or orphaned managed container
    time.sleep(2)  # let the create watcher see the last events
    with chaos.lock:
        twice = {cid: n for cid, n in chaos.creates.items() if n > 1}
    if twice:
        chaos.fail(f"containers created more than once for commands {twice}")
    client = docker.from_env(timeout=60)
    managed = client.containers.list(all=True, filters={"label": f"{protocol.LABEL_AGENT_ID}={run.agent_id}"})
    by_command = collections.Counter(c.labels.get(protocol.LABEL_COMMAND_ID) for c in managed)
    if any(n > 1 for n in by_command.values()):
        chaos.fail(f"duplicated managed containers: {by_command}")
    for container in managed:
        cid = container.labels.get(protocol.LABEL_COMMAND_ID)
        state = backend.command(cid)["state"] if cid in chaos.commands else None
        if state != protocol.SUCCEEDED:
            chaos.fail(f"orphaned managed container {container.name}: its command {cid} ended {state}")

    # 3. every timeline record and event delivered: nothing left in the agent's outbox
    outbox = Outbox(Path(run.env["FADEN_NODE_AGENT_STATE_PATH"]).parent)
    try:
        wait_for(
            lambda: not [r for r in outbox.pending(10_000) if r["kind"] in (protocol.TIMELINE, protocol.EVENT)],
            90,
            interval_s=1,
            what="the outbox to drain",
        )
    except AssertionError:
        left = outbox.pending(10_000)
        chaos.fail(f"{len(left)} record(s) never delivered: {collections.Counter(r['kind'] for r in left)}")
    finally:
        outbox.close()
    events = backend.events(run.node_id)

    # 4. every log line delivered (journal markers; lines of the containers that still exist)
    def missing_journal() -> set[str]:
        shipped = {e.line for e in run.loki.entries() if e.labels.get("container") == f"node-{run.agent_id}"}
        return set(chaos.journal_markers) - shipped

    try:
        wait_for(lambda: not missing_journal(), 120, interval_s=1, what="every journal line in the receiver")
    except AssertionError:
        missing = sorted(missing_journal())
        chaos.fail(
            f"{len(missing)} of {len(chaos.journal_markers)} journal lines never reached Loki, e.g. {missing[:5]}"
        )
    container_lines = 0

    def missing_container_lines() -> list[str]:
        nonlocal container_lines
        shipped = collections.defaultdict(set)
        for entry in run.loki.entries():
            if entry.labels.get("source") == "container":
                shipped[entry.labels.get("container")].add(entry.line.rstrip("\n"))
        missing, container_lines = [], 0
        for container in client.containers.list(
            all=True, filters={"label": f"{protocol.LABEL_AGENT_ID}={run.agent_id}"}
        ):
            settled = int(time.time()) - 5  # the newest lines may still be in flight
            cutoff = [
                line
                for line in container.logs(stdout=True, stderr=True, until=settled)
                .decode(errors="replace")
                .splitlines()
                if line.startswith("chaos-line")
            ]
            container_lines += len(cutoff)
            missing += [f"{container.name}: {line}" for line in cutoff if line not in shipped[container.name]]
        return missing

    try:
        wait_for(lambda: not missing_container_lines(), 90, interval_s=2, what="every container line in the receiver")
    except AssertionError:
        missing = missing_container_lines()
        chaos.fail(f"{len(missing)} container log lines never reached Loki, e.g. {missing[:5]}")
    keys = [e.key() for e in run.loki.entries()]
    duplicates = len(keys) - len(set(keys))  # exact duplicates only: Loki drops them

    # 5. heartbeat gaps: 2x the interval, except while a fault silenced the stream, then bounded
    beats = sorted(b["received_at"] for b in backend.heartbeats(run.node_id))
    worst = 0.0
    for earlier, later in itertools.pairwise(beats):
        gap = later - earlier
        if gap <= 2 * HEARTBEAT_S:
            continue
        excusing = [
            f
            for f in chaos.faults
            if f.kind in HEARTBEAT_FAULTS and f.start <= later and (f.end or later) + EXCUSED_GAP_SLACK_S >= earlier
        ]
        if not excusing:
            chaos.fail(
                f"heartbeat gap of {gap:.1f}s at {time.strftime('%H:%M:%S', time.localtime(earlier))} "
                f"with no fault on the stream path (faults then: "
                f"{[f.kind for f in chaos.faults if f.start <= later and f.end + 5 >= earlier]})"
            )
        bound = max((f.end or later) - f.start for f in excusing) + EXCUSED_GAP_SLACK_S
        if gap > bound:
            chaos.fail(
                f"heartbeat gap of {gap:.1f}s exceeds its bound {bound:.1f}s during {[f.kind for f in excusing]}"
            )
        worst = max(worst, gap)

    # 6. memory bounded
    if chaos.peak_pss_mib > MEMORY_BOUND_MIB:
        chaos.fail(f"agent tree PSS peaked at {chaos.peak_pss_mib:.0f} MiB, above {MEMORY_BOUND_MIB} MiB")

    check_peer_kills(run)  # 7
    check_hostile_fetches(run)  # 8
    check_hostile_registries(run)  # 9
    check_tenant_trees(run)  # 10

    faults = collections.Counter(f.kind for f in chaos.faults)
    print(f"chaos: commands={len(chaos.commands)} outcomes={dict(sorted(outcomes.items()))}")
    print(f"chaos: faults={sum(faults.values())} {dict(sorted(faults.items()))}")
    print(
        f"chaos: managed containers at the end={len(managed)} journal lines={len(chaos.journal_markers)} "
        f"container lines checked={container_lines} "
        f"lines received={len(keys)} exact duplicates={duplicates} events={len(events)}"
    )
    print(
        f"chaos: heartbeats={len(beats)} worst excused gap={worst:.1f}s peak tree PSS={chaos.peak_pss_mib:.0f} MiB "
        f"containers created={sum(chaos.creates.values())}"
    )
    print(
        f"chaos: peer worker kills={[(k['received'], k['receiver'][:80]) for k in chaos.peer_kills]} "
        f"hostile fetches={[(f['mode'], run.backend.command(f['command_id'])['state']) for f in chaos.hostile_fetches]}"
    )


KILLED_HOLDER = re.compile(r"cut: PeerFailure: the stream from peer holder broke after \d+ bytes")


def check_peer_kills(run: Run) -> None:
    """7. The peer worker killed mid-transfer: the receiver saw a cut stream (never a whole
    archive), the worker is back, its ticket box holds no stray file, and the same image is
    served whole again."""
    chaos = run.chaos
    for kill in chaos.peer_kills:
        if kill.get("error"):
            chaos.fail(f"peer worker kill at {kill['at']}: {kill['error']}")
        if not kill["receiver"].startswith("cut"):
            chaos.fail(
                f"peer worker (pid {kill['pid']}) killed at {kill['at']} with {kill['transfers_active']} transfer(s) "
                f"under way, yet the receiver got a whole archive ({kill['received']} bytes)"
            )
        elif not KILLED_HOLDER.match(kill["receiver"]):  # a killed holder is no malformed peer
            chaos.fail(f"peer worker killed at {kill['at']}: the receiver read {kill['receiver'][:200]}")
    killed = {kill["pid"] for kill in chaos.peer_kills}
    try:
        wait_for(
            lambda: (
                (row := run.agent.workers().get("peer"))
                and row["state"] == "RUNNING"
                and row["pid"] not in killed
                and (row.get("status") or {}).get("listening")
            ),
            30,
            what="the peer worker back and listening",
        )
    except AssertionError:
        chaos.fail(f"the peer worker is not back after {len(killed)} kill(s): {run.agent.workers().get('peer')}")
    box = Path(run.env["FADEN_NODE_AGENT_RUNTIME_DIR"]) / TICKET_DIR
    stray = sorted(p.name for p in box.iterdir()) if box.is_dir() else []
    if stray:
        chaos.fail(f"{len(stray)} stray file(s) in the peer ticket box {box}: {stray[:5]}")
    ticket = f"chaos-after-{uuid.uuid4().hex}"
    try:
        serve_ticket(run.backend, run.node_id, run.served_id, ticket)
        members = fetch_archive_members(f"http://127.0.0.1:{run.peer_port}", run.served_id, ticket)
    except Exception as exc:  # noqa: BLE001 - any way it fails is the invariant's failure
        chaos.fail(f"serving {run.served_id[:19]} again after the peer worker kills failed: {exc!r}"[:600])
    if "manifest.json" not in members or not any(m.endswith("/layer.tar") for m in members):
        chaos.fail(f"serving {run.served_id[:19]} after the peer worker kills: not a whole archive: {members[:9]}")


def check_hostile_fetches(run: Run) -> None:
    """8. Each fetch with a hostile first peer ended within its deadline: through the honest
    peer, or (a drip) failed at the deadline; the executor lived through it; the redirect was
    not followed; nothing but the image asked for reached the engine."""
    chaos = run.chaos
    for fetch in chaos.hostile_fetches:
        what = f"image.fetch {fetch.get('command_id')} (hostile peer: {fetch['mode']})"
        if fetch.get("error"):
            chaos.fail(f"{what}: {fetch['error']}")
        timeline = run.backend.command(fetch["command_id"])["timeline"]
        end = next(r for r in timeline if r["state"] in protocol.TERMINAL_STATES)
        took = end["ts"] - timeline[0]["ts"]
        if took > fetch["deadline_s"] + DEADLINE_SLACK_S:
            chaos.fail(f"{what} ended {took:.1f} s after it was received, past its {fetch['deadline_s']} s deadline")
        result = end.get("result") or {}
        if fetch["mode"] == "drip":
            expected, got = (protocol.FAILED, "timeout"), (end["state"], end.get("reason"))
        else:
            expected = (protocol.SUCCEEDED, fetch["good"].removeprefix("http://"), 1)
            got = (end["state"], result.get("source"), len(result.get("failed_sources") or ()))
        if got != expected:
            chaos.fail(f"{what} ended {got}, expected {expected}: {end.get('reason')} {end.get('message')}"[:800])
        before, after = fetch["executor_before"], fetch["executor_after"]
        if not before or not after or after["state"] != "RUNNING" or after["pid"] != before["pid"]:
            chaos.fail(f"{what}: the executor did not live through it: before {before}, after {after}"[:800])
        if fetch["decoy_on_engine"]:
            chaos.fail(f"{what}: the other image the hostile peer sent ({run.decoy_id[:19]}) is on the engine")
        if fetch["wanted_on_engine"] != (end["state"] == protocol.SUCCEEDED):
            chaos.fail(f"{what} ended {end['state']}, yet the image on the engine: {fetch['wanted_on_engine']}")
        if fetch["redirected_to"]:
            chaos.fail(f"{what}: the redirect was followed ({fetch['redirected_to']} request(s) at its target)")


def check_hostile_registries(run: Run) -> None:
    """9. Beside three pulls from a dripping registry, the honest pull started within a few
    seconds and succeeded; each dripping pull ended by its deadline."""
    chaos = run.chaos
    for record in chaos.hostile_registries:
        if not record.get("honest"):
            continue  # the backend was down when it was sent
        timeline = run.backend.command(record["honest"])["timeline"]
        received = timeline[0]["ts"]
        pulled = [r for r in timeline if r["state"] == protocol.PROGRESS and r.get("phase") == "pull"]
        end = next((r for r in timeline if r["state"] in protocol.TERMINAL_STATES), None)
        if not pulled or pulled[0]["ts"] - received > HONEST_PULL_START_S:
            chaos.fail(f"honest pull {record['honest']} beside a dripping registry did not start in time: {timeline}")
        if end is None or end["state"] != protocol.SUCCEEDED:
            chaos.fail(f"honest pull {record['honest']} beside a dripping registry ended {end}")
        for cid in record["hostile"]:
            timeline = run.backend.command(cid)["timeline"]
            end = next((r for r in timeline if r["state"] in protocol.TERMINAL_STATES), None)
            if end is None or end["ts"] - timeline[0]["ts"] > 25 + DEADLINE_SLACK_S:
                chaos.fail(f"dripping pull {cid} did not end by its 25 s deadline: {end}")


def check_tenant_trees(run: Run) -> None:
    """10. A Ray container with a hostile log tree ran and was removed; the logs worker lived."""
    chaos = run.chaos
    for record in chaos.tenant_trees:
        for key in ("run", "remove"):
            cid = record.get(key)
            state = run.backend.command(cid)["state"] if cid else None
            if cid and state not in (protocol.SUCCEEDED, protocol.FAILED):
                chaos.fail(f"the hostile tree's container.{key} {cid} ended {state}")
        before, after = record.get("logs_before"), record.get("logs_after")
        if before and after and after["state"] != "RUNNING":
            chaos.fail(f"the logs worker is not running after a hostile Ray tree: {after}")
