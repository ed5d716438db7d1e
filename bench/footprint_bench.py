"""What the agent costs to keep (issue 16), each figure beside its comparison, same run:

  memory    PSS per process of the idle tree, split into shared and private, and the
            private memory each imported package costs (a fresh interpreter per package);
  idle      CPU % and wakeups/s (voluntary context switches, all threads) per process, and
            per thread for a process above the goal of about one a second (ZeroMQ names its
            threads; Python's carry the process's name and their tid: py-spy dump names them),
            dockerd's CPU in the same window (the bench's own engine, so the events,
            changes and engine CPU are the agent's), and the uplink bytes/s by path through a
            counting proxy in front of the reference backend; with 0 and with N managed
            containers (some of them Ray containers with log directories);
  command   container.run queued at the backend -> backend sees `succeeded`, against
            `docker run -d` + the executor's 0.2 s settle check, alternating; where the
            agent's time goes (stream delivery, Docker + settle, report's way back).

The agent runs at its default intervals (heartbeat 15 s, inventory 60 s, worker liveness
3 s, ...) and PEER_START=on_demand (no cluster: no peer worker), shipping a journal
directory to a Loki receiver (not through the backend).
Run: python3 bench/footprint_bench.py [--window 120] [--containers 20 --ray 5] [--runs 10]
     python3 bench/footprint_bench.py --prefork [--only TRICK --pairs N]  (each prefork trick's share of the idle tree)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil

from bench import executor_bench, interpreters, output
from bench.counting_proxy import CountingProxy
from bench.pages import page_account
from faden_agent.workers.stream.heartbeat import detail_changes
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import BackendProcess, agent_env_for
from tests.support.journalfiles import JournalWriter
from tests.support.lokireceiver import LokiReceiver
from tests.support.privateengine import PrivateEngine

SETTLE_S = 0.2  # the executor's settle check after a start (commands/container.py)
# settings the test helpers shorten, left to the agent's own defaults here
PRODUCTION_DEFAULTS = (
    "heartbeat_interval_sec",
    "stream_keepalive_sec",
    "reconnect_min_sec",
    "reconnect_max_sec",
    "request_timeout_sec",
    "worker_liveness_sec",
    "worker_hang_timeout_sec",
    "restart_backoff_min_sec",
    "restart_backoff_max_sec",
    "stop_timeout_sec",
    "peer_start",  # the test helpers start every worker; production starts the peer worker on demand
)
# The workers hand back the library pages they touched only to start 10 s after their set-up
# (workers/base.py, COLD_PAGES_AFTER_S): an idle tree is measured once that is done.
SETTLED_S = 15.0
WAKEUP_GOAL_PER_S = 1.0  # "each process wakes at most about once a second when nothing happens"
IMAGE = executor_bench.IMAGE

# ---------------------------------------------------------------- per process counters


def smaps_kib(pid: int) -> dict[str, int]:
    """PSS, shared and private KiB of one process (smaps_rollup)."""
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if rest.strip().endswith("kB"):
                fields[name] = int(rest.split()[0])
    return {
        "pss": fields.get("Pss", 0),
        "pss_anon": fields.get("Pss_Anon", 0),  # the Python heap (inherited or its own) and stacks
        "shared": fields.get("Shared_Clean", 0) + fields.get("Shared_Dirty", 0),
        "private": fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0),
    }


def counters(pid: int) -> tuple[float, dict[int, tuple[int, int]]]:
    """(CPU seconds of the process, {thread id: (voluntary, involuntary) switches})."""
    cpu = psutil.Process(pid).cpu_times()
    switches = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        switches[int(task.name)] = (int(fields["voluntary_ctxt_switches"]), int(fields["nonvoluntary_ctxt_switches"]))
    return cpu.user + cpu.system, switches


def thread_names(pid: int) -> dict[int, str]:
    """{thread id: its name (comm)}: ZeroMQ names its threads; Python's inherit the process's."""
    names = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            names[int(task.name)] = (task / "comm").read_text().strip()
        except OSError:
            pass
    return names


def wakeups_by_thread(
    pid: int, before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]], elapsed: float
) -> list[str]:
    """The threads that woke in the window, busiest first: "name/tid rate" (main: the process's)."""
    names = thread_names(pid)
    rates = sorted(((v - before.get(tid, (0, 0))[0]) / elapsed, tid) for tid, (v, _) in after.items() if tid in names)
    return [f"{'main' if tid == pid else names[tid]}/{tid} {rate:.2f}" for rate, tid in reversed(rates) if rate >= 0.05]


def switches_between(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]) -> tuple[int, int]:
    """Switches in the window of the threads alive at its end (one born in it counts from
    zero; one that ended in it is not seen: its counts leave with it)."""
    vol = sum(v - before.get(tid, (0, 0))[0] for tid, (v, _) in after.items())
    invol = sum(i - before.get(tid, (0, 0))[1] for tid, (_, i) in after.items())
    return vol, invol


def named_tree(agent: AgentProcess) -> dict[str, int]:
    """{label: pid} of the agent's tree: supervisor, workers by name, their children."""
    names = {agent.pid: "supervisor"}
    names.update({row["pid"]: row["name"] for row in agent.workers().values() if row.get("pid")})
    root = psutil.Process(agent.pid)
    out = {}
    for proc in [root, *root.children(recursive=True)]:
        try:
            out[names.get(proc.pid) or f"{proc.name()} (child of {names.get(proc.ppid(), proc.ppid())})"] = proc.pid
        except psutil.NoSuchProcess:
            pass
    return out


def dockerd_pid() -> int:
    """The engine at /var/run/docker.sock (its pid file); other dockerds may run beside it (test rigs)."""
    return int(Path("/var/run/docker.pid").read_text())


def memory(agent: AgentProcess, beside: tuple[int, ...] = ()) -> dict[str, Any]:
    """PSS, shared and private KiB per process of the tree; "pss_quiet": its PSS with each page
    split only among the tree, this bench and the `beside` processes (its backend), which is
    what a machine running nothing else reads and does not move with other work (bench/pages.py)."""
    tree = named_tree(agent)
    per = {name: smaps_kib(pid) for name, pid in tree.items()}
    for name, pages in page_account(tree, [os.getpid(), *beside]).items():
        if name in per:
            per[name].update(pages)
    return {
        "per_process_kib": per,
        "tree_pss_kib": sum(p["pss"] for p in per.values()),
        "tree_pss_quiet_kib": sum(p.get("pss_quiet", 0) for p in per.values()),
        "tree_private_kib": sum(p["private"] for p in per.values()),
    }


def memory_by_python(
    env: dict[str, str], root: Path, backend: BackendProcess, node: str, binary: Path | None = None
) -> dict[str, Any]:
    """The idle tree's memory, the same agent (same state: no new enrollment) on each CPython
    found (bench/interpreters.py) and, given one, as the standalone binary:
    {"3.12": memory(...), "binary": ...} or {"3.12": {"error": ...}}."""
    out: dict[str, Any] = {}
    variants: list[tuple[str, Any]] = sorted(interpreters.cpythons().items())
    if binary is not None:
        variants.append(("binary", binary))
    for version, python in variants:
        try:
            if version == "binary":
                argv = [str(binary), "run"]
            else:
                argv = [interpreters.with_agent(python), "-m", "faden_agent", "run"]
                interpreters.compile_agent(argv[0])
        except (OSError, subprocess.CalledProcessError) as exc:
            out[version] = {"error": f"no venv with the agent for {python}: {exc}"}
            continue
        seen = backend.inventory(node).get("received_at")
        started = time.monotonic()
        agent = AgentProcess(env, root / f"agent-{version}.log", argv=argv).start(timeout_s=60)
        try:
            wait_for(lambda seen=seen: backend.inventory(node).get("received_at") != seen, 90, 1.0, "an inventory")
            time.sleep(max(5.0, started + SETTLED_S - time.monotonic()))
            out[version] = memory(agent, (backend.proc.pid,))
        finally:
            agent.stop()
            agent.kill()
    return out


def production_env(backend: BackendProcess, root: Path, **addresses: Any) -> dict[str, str]:
    """The defaults of a production agent: only its addresses and files are the bench's; Python
    as the systemd unit runs it."""
    env = agent_env_for(backend, root, **addresses)
    for name in PRODUCTION_DEFAULTS:
        env.pop(f"FADEN_NODE_AGENT_{name.upper()}", None)
    return interpreters.as_service(env)


def start_idle(
    env: dict[str, str], backend: BackendProcess, log: Path, argv: list[str] | None = None
) -> tuple[AgentProcess, str]:
    """The agent started and enrolled, settled: 5 s after its first inventory reached the
    backend and SETTLED_S after its start, whichever is later."""
    started = time.monotonic()
    agent = AgentProcess(env, log, argv=argv).start()
    try:
        node = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"], timeout_s=60)["node_id"]
        wait_for(lambda: backend.inventory(node).get("inventory"), 90, 1.0, "the first inventory")
        time.sleep(max(5.0, started + SETTLED_S - time.monotonic()))
    except BaseException:
        agent.stop()
        agent.kill()
        raise
    return agent, node


def memory_over_tls(root: Path, loki_url: str, journal: JournalWriter, docker_host: str) -> dict[str, Any]:
    """The idle tree of an agent whose backend is https, trusting what a production node
    trusts (the public CA bundle, about 140 roots, plus the bench's private CA that signed
    the backend's certificate): what every https connection's certificate store costs."""
    import certifi

    from tests.support.privateca import make_ca_and_server_cert

    tls_dir = root / "tls"
    tls_dir.mkdir()
    ca, cert, key = make_ca_and_server_cert(tls_dir)
    bundle = tls_dir / "public-and-bench.pem"
    bundle.write_bytes(Path(certifi.where()).read_bytes() + ca.read_bytes())
    backend = BackendProcess(root / "backend-tls", root / "backend-tls.log", tls_cert=cert, tls_key=key, ca_bundle=ca)
    backend.start()
    env = production_env(
        backend, root / "tls", loki_url=loki_url, journal_directory=journal.directory, docker_host=docker_host
    )
    env["FADEN_NODE_AGENT_CA_BUNDLE"] = str(bundle)
    agent, _node = start_idle(env, backend, root / "agent-tls.log")
    try:
        return memory(agent, (backend.proc.pid,))
    finally:
        agent.stop()
        agent.kill()
        backend.stop()


def idle_window(agent: AgentProcess, proxy: CountingProxy, seconds: float, docker_pid: int) -> dict[str, Any]:
    """CPU %, wakeups/s per process, dockerd CPU %, uplink B/s by path over one window."""
    tree = named_tree(agent)
    before = {name: counters(pid) for name, pid in tree.items()}
    docker_before = counters(docker_pid)[0]
    wire_before = proxy.snapshot()
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    per: dict[str, dict[str, float]] = {}
    for name, pid in named_tree(agent).items():
        try:
            cpu, switches = counters(pid)
        except (psutil.NoSuchProcess, FileNotFoundError):
            continue
        cpu0, switches0 = before.get(name, (0.0, {}))
        vol, invol = switches_between(switches0, switches)
        per[name] = {
            "cpu_percent": round((cpu - cpu0) / elapsed * 100, 3),
            "wakeups_per_s": round(vol / elapsed, 2),
            "involuntary_per_s": round(invol / elapsed, 2),
            "threads": len(switches),
            "wakeups_by_thread": wakeups_by_thread(pid, switches0, switches, elapsed),
        }
    wire_after = proxy.snapshot()
    wire = {}
    for path, now in wire_after.items():
        was = wire_before.get(path, {"up": 0, "down": 0, "requests": 0})
        up, down, requests = now["up"] - was["up"], now["down"] - was["down"], now["requests"] - was["requests"]
        if up or down or requests:
            wire[path] = {
                "up_b_per_s": round(up / elapsed, 1),
                "down_b_per_s": round(down / elapsed, 1),
                "requests": requests,
            }
    return {
        "window_s": round(elapsed, 1),
        "per_process": per,
        "tree_cpu_percent": round(sum(p["cpu_percent"] for p in per.values()), 3),
        "tree_wakeups_per_s": round(sum(p["wakeups_per_s"] for p in per.values()), 2),
        "dockerd_cpu_percent": round((counters(docker_pid)[0] - docker_before) / elapsed * 100, 3),
        "uplink_by_path": wire,
        "uplink_b_per_s": round(sum(w["up_b_per_s"] for p, w in wire.items() if " kind=" not in p), 1),
        "downlink_b_per_s": round(sum(w["down_b_per_s"] for p, w in wire.items() if " kind=" not in p), 1),
    }


def detail_beats(backend: BackendProcess, node: str, since: float, until: float) -> list[dict[str, Any]]:
    """The heartbeats due in [since, until] (wall time) that carried the whole detail, each
    with what differed from the detail before it: why the uplink paid for it."""
    out, previous = [], None
    for beat in (b["data"] for b in backend.heartbeats(node)):
        if "workers" not in beat:
            continue
        if since <= beat.get("due_at", 0) <= until:
            out.append({"beat": beat.get("beat"), "changed": detail_changes(previous, beat)})
        previous = beat
    return out


# ---------------------------------------------------------------- per package memory

_MODULES_OF = """
import json, sys
import faden_agent.workers.base, faden_agent.config
before = set(sys.modules)
from faden_agent.workers import WORKERS
from faden_agent.workers.base import load_worker_class
out = {}
for name, target in WORKERS.items():
    load_worker_class(target)
out = sorted({m.split('.')[0] for m in set(sys.modules) - before} - {'faden_agent'})
print(json.dumps({"supervisor": sorted({m.split('.')[0] for m in before} - set(sys.builtin_module_names)),
                  "workers": out}))
"""

_COST_OF = """
import sys
import faden_agent.workers.base, faden_agent.config
def private():
    with open('/proc/self/smaps_rollup') as f:
        return sum(int(l.split()[1]) for l in f if l.startswith(('Private_Clean', 'Private_Dirty')))
base = private()
__import__(sys.argv[1])
print(private() - base)
"""


def package_costs(packages: list[str]) -> dict[str, int]:
    """Private KiB each package adds to an interpreter that has what every worker imports."""
    out = {}
    for package in packages:
        done = subprocess.run([sys.executable, "-c", _COST_OF, package], capture_output=True, text=True, check=False)
        if done.returncode == 0:
            out[package] = int(done.stdout.strip())
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def imported_packages() -> dict[str, list[str]]:
    done = subprocess.run([sys.executable, "-c", _MODULES_OF], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


# ---------------------------------------------------------------- managed containers, commands


def run_command(backend: BackendProcess, node: str, spec: dict[str, Any]) -> dict[str, Any]:
    command_id = backend.send_command(node, "container.run", spec)
    executor_bench.wait_succeeded(backend, command_id, timeout_s=120)
    return backend.command(command_id)


def start_managed(backend: BackendProcess, node: str, prefix: str, count: int, ray: int) -> None:
    """`count` managed containers through the agent; `ray` of them Ray containers writing a
    Serve log file into their log directory."""
    serve_log = "/tmp/ray/session_1/logs/serve"
    for i in range(count):
        if i < ray:
            script = f"mkdir -p {serve_log} && echo started >> {serve_log}/replica.log && exec sleep 3600"
            spec = {"name": f"{prefix}-ray{i}", "image": IMAGE, "command": ["sh", "-c", script], "ray": True}
        else:
            spec = {"name": f"{prefix}-m{i}", "image": IMAGE, "command": ["sleep", "3600"]}
        run_command(backend, node, spec)


def command_round_trips(
    backend: BackendProcess, node: str, engine: PrivateEngine, prefix: str, runs: int
) -> dict[str, Any]:
    """Agent queued -> succeeded seen at the backend, against `docker run -d` + settle,
    alternating (one warm-up each, not counted), and where the agent's time goes."""
    agent_s, docker_s, delivery, working, reporting = [], [], [], [], []
    for i in range(runs + 1):
        name = f"{prefix}-rt{i}"
        t0 = time.time()
        command_id = backend.send_command(
            node, "container.run", {"name": name, "image": IMAGE, "command": ["sleep", "600"]}
        )
        seen = executor_bench.wait_succeeded(backend, command_id)
        timeline = {r["state"]: r for r in backend.command(command_id)["timeline"]}
        t1 = time.monotonic()
        engine.docker("run", "-d", "--name", f"{prefix}-cli{i}", IMAGE, "sleep", "600")
        cli = time.monotonic() - t1
        engine.docker("rm", "-f", name, f"{prefix}-cli{i}")
        if i:
            agent_s.append(seen - t0)
            docker_s.append(cli + SETTLE_S)
            received, succeeded = timeline["received"], timeline["succeeded"]
            delivery.append(received["ts"] - t0)
            working.append(succeeded["ts"] - received["ts"])
            reporting.append(seen - succeeded["ts"])
    med = statistics.median
    return {
        "runs": runs,
        "agent_median_s": med(agent_s),
        "docker_run_d_plus_settle_median_s": med(docker_s),
        "ratio": med(agent_s) / med(docker_s),
        "queued_to_received_median_s": med(delivery),
        "received_to_succeeded_median_s": med(working),
        "succeeded_to_seen_median_s": med(reporting),
    }


def remove_prefixed(engine: PrivateEngine, prefix: str) -> None:
    ids = engine.docker("ps", "-aq", "--filter", f"name={prefix}", check=False).stdout.split()
    if ids:
        engine.docker("rm", "-f", *ids, check=False)


# ---------------------------------------------------------------- the rig


@dataclass
class Rig:
    backend: BackendProcess
    engine: PrivateEngine
    loki: LokiReceiver
    proxy: CountingProxy
    journal: JournalWriter
    env: dict[str, str]
    agent: AgentProcess
    node: str


@contextmanager
def metered_agent(
    root: Path,
    extra_env: dict[str, str] | None = None,
    agent_argv: list[str] | None = None,
    backend_runner: list[str] | None = None,
) -> Iterator[Rig]:
    """An idle production agent (start_idle) on a private engine, shipping a journal to a
    Loki receiver, its backend behind a counting proxy; everything stopped afterwards.
    agent_argv: the agent's command; backend_runner: what runs the backend in place of
    `python -m faden_agent` (an older tree's)."""
    journal = JournalWriter(root / "journal")
    journal.append([journal.entry("bench seed")])
    backend = BackendProcess(root / "backend", root / "backend.log")
    if backend_runner:
        backend.argv = backend_runner + backend.argv[3:]
    backend.start()
    url = urlsplit(backend.url)
    try:
        with (
            PrivateEngine(root / "engine", image=IMAGE) as engine,
            LokiReceiver() as loki,
            CountingProxy(url.hostname, url.port) as proxy,
        ):
            env = production_env(
                backend,
                root,
                backend_url=proxy.url,
                loki_url=loki.url,
                journal_directory=journal.directory,
                docker_host=engine.host,
            )
            env.update(extra_env or {})
            agent, node = start_idle(env, backend, root / "agent.log", agent_argv)
            try:
                yield Rig(backend, engine, loki, proxy, journal, env, agent, node)
            finally:
                agent.stop()
                agent.kill()
    finally:
        backend.stop()


# ---------------------------------------------------------------- the run


def measure(
    root: Path, window_s: float, containers: int, ray: int, runs: int, binary: Path | None = None
) -> dict[str, Any]:
    results: dict[str, Any] = {"python": ".".join(map(str, sys.version_info[:3]))}
    prefix = f"fxfoot-{uuid.uuid4().hex[:6]}"
    with metered_agent(root) as rig:
        backend, engine, proxy, env, agent, node = rig.backend, rig.engine, rig.proxy, rig.env, rig.agent, rig.node
        beside = (backend.proc.pid,)
        results["memory"] = memory(agent, beside)
        since = time.time()
        results["idle_0"] = idle_window(agent, proxy, window_s, engine.pid)
        results["idle_0"]["detail_beats"] = detail_beats(backend, node, since, time.time())
        results["memory_after_idle"] = memory(agent, beside)
        if containers:
            start_managed(backend, node, prefix, containers, ray)
            time.sleep(10)  # the log worker found them, the inventory counted them
            since = time.time()
            results[f"idle_{containers}"] = idle_window(agent, proxy, window_s, engine.pid)
            results[f"idle_{containers}"]["detail_beats"] = detail_beats(backend, node, since, time.time())
            results["memory_with_containers"] = memory(agent, beside)
            remove_prefixed(engine, prefix)
        if runs:
            results["command"] = command_round_trips(backend, node, engine, prefix, runs)
        agent.stop()
        results["memory_by_python"] = memory_by_python(env, root, backend, node, binary)
        results["memory_over_tls"] = memory_over_tls(root, rig.loki.url, rig.journal, engine.host)
    packages = imported_packages()
    results["packages"] = packages
    results["package_private_kib"] = package_costs(packages["workers"] + ["zmq", "orjson", "psutil"])
    return results


def prefork_shares(
    root: Path, argv: list[str] | None = None, only: str | None = None, pairs: int = 1
) -> dict[str, Any]:
    """The idle tree's PSS with the prefork tricks on, off, and with each one left out (same
    agent, same state, one start each): a trick's share is what leaving it out adds. `only`:
    on and without that trick, alternating `pairs` times, each the median of its starts."""
    from faden_agent.supervisor.prefork import TRICKS

    tricks = (only,) if only else TRICKS
    journal = JournalWriter(root / "journal")
    journal.append([journal.entry("bench seed")])
    backend = BackendProcess(root / "backend", root / "backend.log").start()
    variants = [("on", {})] + ([] if only else [("off", {"FADEN_NODE_AGENT_PREFORK": "off"})])
    variants += [
        (f"without {name}", {"FADEN_TEST_HOOKS": "1", "FADEN_TEST_HOOK_PREFORK_SKIP": name}) for name in tricks
    ]
    variants *= pairs
    trees: dict[str, list[int]] = {}
    quiets: dict[str, list[int]] = {}
    try:
        with LokiReceiver() as loki:
            env = production_env(backend, root, loki_url=loki.url, journal_directory=journal.directory)
            agent, node = start_idle(env, backend, root / "agent-first.log")  # enrols; later starts reuse the state
            agent.stop()
            agent.kill()
            for label, extra in variants:
                seen = backend.inventory(node).get("received_at")
                started = time.monotonic()
                agent = AgentProcess({**env, **extra}, root / f"agent-{label}.log", argv=argv).start(timeout_s=60)
                try:
                    wait_for(lambda seen=seen: backend.inventory(node).get("received_at") != seen, 90, 1.0, "inventory")
                    time.sleep(max(5.0, started + SETTLED_S - time.monotonic()))
                    figures = memory(agent, (backend.proc.pid,))
                    trees.setdefault(label, []).append(figures["tree_pss_kib"])
                    quiets.setdefault(label, []).append(figures["tree_pss_quiet_kib"])
                finally:
                    agent.stop()
                    agent.kill()
    finally:
        backend.stop()
    tree = {label: int(statistics.median(values)) for label, values in trees.items()}
    quiet = {label: int(statistics.median(values)) for label, values in quiets.items()}
    return {
        **({"runs_quiet_kib": quiets} if pairs > 1 else {}),
        "tree_pss_kib": tree,
        "tree_pss_quiet_kib": quiet,
        "share_kib": {name: tree[f"without {name}"] - tree["on"] for name in tricks},
        "share_quiet_kib": {name: quiet[f"without {name}"] - quiet["on"] for name in tricks},
        **(
            {}
            if only
            else {"off_costs_kib": tree["off"] - tree["on"], "off_costs_quiet_kib": quiet["off"] - quiet["on"]}
        ),
    }


def report(results: dict[str, Any], row) -> None:
    """Table rows (figure, value, compared with) through `row`."""
    mem = results["memory"]
    per = mem["per_process_kib"]
    row(
        f"idle PSS, whole tree (CPython {results.get('python', '?')})",
        f"{mem.get('tree_pss_quiet_kib', 0) / 1024:.1f} MiB on a quiet machine ({len(per)} procs)",
        f"PSS here {mem['tree_pss_kib'] / 1024:.1f} MiB; private {mem['tree_private_kib'] / 1024:.1f} MiB; "
        "goal <= 50 MiB (3.12), 60 (3.11)",
    )
    for name, m in per.items():
        row(
            f"  PSS {name}",
            f"{m.get('pss_quiet', 0) / 1024:.1f} MiB quiet",
            f"here {m['pss'] / 1024:.1f}: shared {m['shared'] / 1024:.1f}, private {m['private'] / 1024:.1f} MiB, "
            f"anon PSS {m.get('pss_anon', 0) / 1024:.1f} MiB",
        )
    for version, other in results.get("memory_by_python", {}).items():
        row(
            "  idle PSS, whole tree, the standalone binary"
            if version == "binary"
            else f"  idle PSS, whole tree, CPython {version}",
            f"{other.get('tree_pss_quiet_kib', 0) / 1024:.1f} MiB quiet" if "tree_pss_kib" in other else "NOT MEASURED",
            other.get("error", "")
            or f"PSS here {other['tree_pss_kib'] / 1024:.1f}, private {other['tree_private_kib'] / 1024:.1f} MiB; "
            "same agent and state",
        )
    if "memory_over_tls" in results:
        tls = results["memory_over_tls"]
        row(
            "  idle PSS, whole tree, backend over https",
            f"{tls.get('tree_pss_quiet_kib', 0) / 1024:.1f} MiB quiet",
            f"public CA bundle (~140 roots); http above {mem.get('tree_pss_quiet_kib', 0) / 1024:.1f} MiB; "
            + ", ".join(f"{p} {m.get('pss_quiet', 0) / 1024:.1f}" for p, m in tls["per_process_kib"].items()),
        )
    costs = results.get("package_private_kib", {})
    row(
        "  private KiB per imported package",
        ", ".join(f"{k} {v}" for k, v in list(costs.items())[:6]),
        "fresh interpreter with the worker base, per package",
    )
    for key in [k for k in results if k.startswith("idle_")]:
        idle = results[key]
        n = key.split("_")[1]
        goal = "0.3" if n == "0" else "0.5"
        row(
            f"idle CPU, {n} managed containers, {idle['window_s']:.0f} s",
            f"{idle['tree_cpu_percent']:.2f} % of a core",
            f"goal <= {goal} %",
        )
        row(
            f"  dockerd CPU, {n} managed containers",
            f"{idle['dockerd_cpu_percent']:.3f} % of a core",
            "same window, the bench's own engine; goal <= 0.1 %",
        )
        row(
            f"  wakeups/s, {n} containers",
            f"{idle['tree_wakeups_per_s']:.1f} /s whole tree",
            ", ".join(f"{p} {v['wakeups_per_s']:.1f}" for p, v in idle["per_process"].items())
            + f"; goal <= ~{WAKEUP_GOAL_PER_S:g} per process",
        )
        for p, v in idle["per_process"].items():
            if v["wakeups_per_s"] > WAKEUP_GOAL_PER_S:
                row(f"    threads of {p}", "", ", ".join(v.get("wakeups_by_thread", [])[:8]))
        row(
            f"  CPU per process, {n} containers",
            "",
            ", ".join(f"{p} {v['cpu_percent']:.2f}" for p, v in idle["per_process"].items()),
        )
        row(
            f"idle uplink, {n} containers",
            f"{idle['uplink_b_per_s']:.1f} B/s up",
            "; ".join(
                f"{p} {w['up_b_per_s']:.1f} up/{w['down_b_per_s']:.1f} down ({w['requests']} req)"
                for p, w in idle["uplink_by_path"].items()
                if " kind=" not in p
            )
            + "; goal <= 50 B/s",
        )
        details = idle.get("detail_beats", [])
        row(
            f"  beats with the whole detail, {n} containers",
            str(len(details)),
            "; ".join(f"beat {d['beat']}: {', '.join(d['changed'])}" for d in details)[:300] or "only pulses",
        )
        row(
            f"  uplink records by kind, {n} containers",
            "",
            "; ".join(
                f"{p.split('kind=')[1]} {w['up_b_per_s']:.1f} B/s ({w['requests']} records)"
                for p, w in idle["uplink_by_path"].items()
                if " kind=" in p
            ),
        )
    if "command" in results:
        c = results["command"]
        row(
            "container.run queued -> succeeded at backend",
            f"{c['agent_median_s'] * 1000:.0f} ms (median of {c['runs']})",
            f"docker run -d + {SETTLE_S * 1000:.0f} ms settle {c['docker_run_d_plus_settle_median_s'] * 1000:.0f} ms: "
            f"ratio {c['ratio']:.2f}x (goal <= 1.1x)",
        )
        row(
            "  where the agent's time goes",
            f"delivery {c['queued_to_received_median_s'] * 1000:.0f} ms",
            f"received -> succeeded {c['received_to_succeeded_median_s'] * 1000:.0f} ms, "
            f"report's way back {c['succeeded_to_seen_median_s'] * 1000:.0f} ms",
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=float, default=120.0)
    parser.add_argument("--containers", type=int, default=20)
    parser.add_argument("--ray", type=int, default=5)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", type=Path, default=Path("bench/results/footprint.json"))
    parser.add_argument("--binary", type=Path, help="also restart the same agent as this standalone binary")
    parser.add_argument("--prefork", action="store_true", help="only each prefork trick's share of the idle tree")
    parser.add_argument("--python", help="with --prefork: the CPython version to run the agent on (e.g. 3.11)")
    from faden_agent.supervisor.prefork import TRICKS

    parser.add_argument("--only", choices=TRICKS, help="with --prefork: on and without this one trick only (an A/B)")
    parser.add_argument("--pairs", type=int, default=1, help="with --prefork: starts of each variant, alternating")
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error(f"--pairs must be 1 or more, not {args.pairs}")
    import tempfile

    interpreters.compile_agent(sys.executable)
    if args.prefork:
        with tempfile.TemporaryDirectory(prefix="faden-prefork-") as tmp:
            python = interpreters.cpythons()[args.python] if args.python else None
            argv = [interpreters.with_agent(python), "-m", "faden_agent", "run"] if python else None
            if argv:
                interpreters.compile_agent(argv[0])
            shares = prefork_shares(Path(tmp), argv, args.only, args.pairs)
        print(json.dumps(shares, indent=2))
        return 0

    with tempfile.TemporaryDirectory(prefix="faden-footprint-") as tmp:
        results = measure(Path(tmp), args.window, args.containers, args.ray, args.runs, args.binary)
    output.table_and_json(results, report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
