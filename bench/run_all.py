"""All benchmark figures in one run: a table on stdout and one JSON file. Every figure is
printed next to what it is compared with, measured side by side in the same run.

    python3 bench/run_all.py [--quick] [--with-binary] [--json bench/results/all.json]

Sections (each one's failure is reported in the table and the JSON, the others still run):
  agent      one real agent enrolled to the reference backend (1 s heartbeat), shipping a
             journal directory to a Loki-compatible receiver: idle footprint (PSS of the
             whole tree, CPU % over a window), heartbeat lateness idle / while dockerd is
             SIGSTOPped under a container.run / while the log worker ships a flood, command
             round trip vs the docker SDK, uplink backlog drain after an outage;
  footprint  one agent at the production intervals (heartbeat 15 s, inventory 60 s) behind a
             byte-counting proxy: PSS per process (shared/private) and per imported package,
             idle CPU and wakeups per process and dockerd's CPU with 0 and 20 managed
             containers (5 Ray with log dirs), idle uplink B/s by path and record kind,
             container.run queued -> succeeded vs `docker run -d` + the 0.2 s settle;
  restart    worker restart latency after a first SIGKILL vs the bare fork-to-first-heartbeat;
  logs       journald -> Loki receiver lines/s vs `journalctl --output=json` alone;
  inventory  one full inventory record: build time and size vs the "unchanged" record;
  binary     (--with-binary only: needs a PyInstaller build) standalone binary vs pip.

The default run takes about 12-15 minutes on 2 cores; --quick about 6.
dockerd is stopped for at most STOP_S seconds and always continued (it is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import psutil
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import (
    executor_bench,
    figures,
    footprint_bench,
    inventory_bench,
    logs_bench,
    start_bench,
    stream_bench,
    supervisor_bench,
)
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import BackendProcess, agent_env_for
from tests.support.journalfiles import JournalWriter
from tests.support.lokireceiver import LokiReceiver

HEARTBEAT_S = 1.0


class Table:
    """Rows of (figure, value, compared with); printed as they come and kept for the JSON."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str]] = []

    def row(self, figure: str, value: str, compared: str = "") -> None:
        self.rows.append((figure, value, compared))
        print(f"{figure:<46} {value:<40} {compared}", flush=True)


# ---------------------------------------------------------------- helpers


def cpu_seconds(pid: int) -> float | None:
    try:
        times = psutil.Process(pid).cpu_times()
        return times.user + times.system
    except psutil.NoSuchProcess:
        return None


def idle_footprint(agent: AgentProcess, window_s: float) -> dict[str, Any]:
    """PSS per process of the tree now, and CPU % (of one core) per process over the window."""
    procs = footprint_bench.named_tree(agent)
    pss = {name: footprint_bench.smaps_kib(pid)["pss"] for name, pid in procs.items()}
    before = {name: cpu_seconds(pid) for name, pid in procs.items()}
    started = time.monotonic()
    time.sleep(window_s)
    elapsed = time.monotonic() - started
    cpu: dict[str, float] = {}
    for name, pid in footprint_bench.named_tree(agent).items():  # processes born during the window count from zero
        now = cpu_seconds(pid)
        if now is not None:
            cpu[name] = round((now - (before.get(name) or 0.0)) / elapsed * 100, 3)
    return {
        "window_s": round(elapsed, 1),
        "pss_kib": pss,
        "tree_pss_kib": sum(pss.values()),
        "processes": len(pss),
        "cpu_percent": cpu,
        "tree_cpu_percent": round(sum(cpu.values()), 3),
    }


def beats_between(backend: BackendProcess, node: str, start: float, end: float) -> list[dict]:
    return [b for b in backend.heartbeats(node) if start <= b["data"]["due_at"] <= end]


def lateness(backend: BackendProcess, node: str, start: float, end: float) -> dict[str, Any]:
    time.sleep(HEARTBEAT_S * 2)  # the last beats of the window have reached the backend
    return stream_bench.lateness_figures(beats_between(backend, node, start, end), HEARTBEAT_S)


def engine_up(client: docker.DockerClient, timeout_s: float = 90.0) -> None:
    """Waits for the Docker engine to answer (it is shared: other work may be restarting it)."""

    def answers() -> bool:
        try:
            return bool(client.ping())
        except Exception:  # noqa: BLE001 - any failure means "not yet"
            return False

    wait_for(answers, timeout_s, interval_s=0.5, what="the Docker engine to answer")


def on_engine(client: docker.DockerClient, results: dict, key: str, step: Callable[[], Any]) -> Any:
    """Runs a Docker-using step; once more (noted in the JSON) if the shared engine went away under it."""
    engine_up(client)
    try:
        return step()
    # SystemExit: executor_bench's way of saying a command ended failed (the engine went away)
    except (docker.errors.DockerException, requests.exceptions.ConnectionError, SystemExit) as exc:
        results.setdefault("retried_after_engine_error", {})[key] = f"{type(exc).__name__}: {exc}"
        engine_up(client)
        return step()


def lateness_dockerd_stopped(
    backend: BackendProcess, node: str, client: docker.DockerClient, prefix: str, stop_s: float
) -> dict[str, Any]:
    """Heartbeats while a container.run is inside a Docker call to a SIGSTOPped dockerd."""
    engine_up(client)
    pid = footprint_bench.dockerd_pid()
    name = f"{prefix}-hung"
    start = time.time()
    os.kill(pid, signal.SIGSTOP)
    try:
        command_id = backend.send_command(
            node, "container.run", {"name": name, "image": executor_bench.IMAGE, "command": ["sleep", "600"]}
        )
        time.sleep(stop_s)
        states_during = [r["state"] for r in backend.command(command_id)["timeline"]]
    finally:
        os.kill(pid, signal.SIGCONT)
    end = time.time()
    figures = lateness(backend, node, start, end)
    command = backend.wait_command(command_id, timeout_s=90)
    on_engine(client, {}, "cleanup", lambda: executor_bench.remove(client, prefix))
    return {
        **figures,
        "stopped_s": round(end - start, 1),
        "command_states_while_stopped": states_during,
        "command_final_state": command["state"],
    }


def lateness_log_flood(
    backend: BackendProcess, node: str, loki: LokiReceiver, journal: JournalWriter, entries: int
) -> dict[str, Any]:
    """Heartbeats while `entries` journal lines are appended and shipped, until all arrived."""
    start = time.time()
    logs_bench.append_lines(journal, entries)
    appended = time.time()
    wait_for(
        lambda: loki.stats()["entries"] >= entries and logs_bench.bench_lines(loki) >= entries,
        600,
        interval_s=0.5,
        what=f"{entries} flood lines at the receiver",
    )
    end = time.time()
    return {
        **lateness(backend, node, start, end),
        "lines": entries,
        "append_s": round(appended - start, 1),
        "all_shipped_after_s": round(end - start, 1),
    }


# ---------------------------------------------------------------- sections


def agent_section(table: Table, results: dict, args: argparse.Namespace, root: Path) -> None:
    client = docker.from_env(timeout=60)
    prefix = f"fxrun-{uuid.uuid4().hex[:6]}"
    journal = JournalWriter(root / "journal")  # journalctl needs a file to follow from the start
    journal.append([journal.entry("bench seed")])
    backend = BackendProcess(root / "backend", root / "backend.log").start()
    with LokiReceiver() as loki:
        env = agent_env_for(
            backend,
            root,
            heartbeat_interval_sec=HEARTBEAT_S,
            loki_url=loki.url,
            journal_directory=journal.directory,
            **logs_bench.RECEIVER_FORMAT,
            docker_timeout_sec=60,
            worker_liveness_sec=1,
            worker_hang_timeout_sec=30,
        )
        agent = AgentProcess(env, root / "agent.log").start()
        try:
            node = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])["node_id"]
            time.sleep(args.settle)

            t0 = time.time()
            idle = results["idle_footprint"] = idle_footprint(agent, args.idle_window)
            results["heartbeat_idle"] = lateness(backend, node, t0, time.time())
            pss, cpu = idle["pss_kib"], idle["cpu_percent"]
            table.row(
                "idle PSS, whole agent tree",
                f"{idle['tree_pss_kib'] / 1024:.1f} MiB ({idle['processes']} procs)",
                f"supervisor alone {pss['supervisor'] / 1024:.1f} MiB; per worker "
                + ", ".join(f"{n} {v / 1024:.1f}" for n, v in pss.items() if n != "supervisor")
                + " MiB",
            )
            table.row(
                f"idle CPU, whole tree, over {idle['window_s']:.0f} s",
                f"{idle['tree_cpu_percent']:.2f} % of one core",
                f"supervisor alone {cpu.get('supervisor', 0):.2f} %; "
                + ", ".join(f"{n} {v:.2f}" for n, v in cpu.items() if n != "supervisor")
                + " %",
            )
            hb = results["heartbeat_idle"]
            table.row("heartbeat lateness idle (p50/p99/max)", fmt_lateness(hb), "baseline for the two rows below")

            try:
                hung = results["heartbeat_dockerd_stopped"] = lateness_dockerd_stopped(
                    backend, node, client, prefix, args.stop_s
                )
                table.row(
                    "heartbeat lateness, dockerd SIGSTOPped",
                    fmt_lateness(hung),
                    f"idle p99 {hb['lateness_p99_ms']:.0f} ms; {hung['stopped_s']} s stop, run states "
                    f"{'/'.join(hung['command_states_while_stopped'])} then {hung['command_final_state']}",
                )
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - report it, keep measuring
                not_measured(table, results, "heartbeat_dockerd_stopped", exc)

            try:
                flood = results["heartbeat_log_flood"] = lateness_log_flood(
                    backend, node, loki, journal, args.flood_lines
                )
                table.row(
                    "heartbeat lateness, log flood shipping",
                    fmt_lateness(flood),
                    f"idle p99 {hb['lateness_p99_ms']:.0f} ms; {flood['lines']} lines appended in "
                    f"{flood['append_s']} s, all at Loki after {flood['all_shipped_after_s']} s",
                )
            except (Exception, SystemExit) as exc:  # noqa: BLE001
                not_measured(table, results, "heartbeat_log_flood", exc)

            try:
                running, reported, direct = on_engine(
                    client,
                    results,
                    "command_round_trip",
                    lambda: executor_bench.round_trips(backend, node, client, prefix, args.runs),
                )
                med = statistics.median
                results["command_round_trip"] = {
                    "runs": args.runs,
                    "agent_to_running_median_s": med(running),
                    "agent_to_succeeded_median_s": med(reported),
                    "sdk_to_running_median_s": med(direct),
                    "ratio_running": med(running) / med(direct),
                    "ratio_succeeded": med(reported) / med(direct),
                }
                table.row(
                    "command round trip: queued -> running",
                    f"{med(running) * 1000:.0f} ms (median of {args.runs})",
                    f"docker SDK run -> running {med(direct) * 1000:.0f} ms: ratio {med(running) / med(direct):.2f}x",
                )
                table.row(
                    "command round trip: queued -> succeeded",
                    f"{med(reported) * 1000:.0f} ms",
                    f"ratio to the SDK {med(reported) / med(direct):.2f}x (includes the report's way back)",
                )
            except (Exception, SystemExit) as exc:  # noqa: BLE001
                not_measured(table, results, "command_round_trip", exc)
            finally:
                on_engine(client, results, "cleanup", lambda: executor_bench.remove(client, prefix))

            try:
                drain = results["uplink_drain"] = stream_bench.drain_rate(backend, env, node, args.backlog)
                table.row(
                    "uplink backlog drain after an outage",
                    f"{drain['records_per_s']} records/s",
                    f"{drain['records']} records in {drain['drain_s']} s; "
                    f"all in {drain['from_backend_start_s']} s from backend start",
                )
            except (Exception, SystemExit) as exc:  # noqa: BLE001
                not_measured(table, results, "uplink_drain", exc)
        finally:
            agent.stop()
            agent.kill()
            backend.stop()
            on_engine(client, results, "cleanup", lambda: executor_bench.remove(client, prefix))


def restart_section(table: Table, results: dict, args: argparse.Namespace, root: Path) -> None:
    (root / "prod").mkdir()
    with AgentProcess(supervisor_bench.production_restart_env(root / "prod"), root / "prod" / "agent.log") as agent:
        lat = supervisor_bench.restart_latencies(agent, "inventory", args.kills, spacing_s=1.2)
    (root / "raw").mkdir()
    with AgentProcess(supervisor_bench.raw_fork_env(root / "raw"), root / "raw" / "agent.log") as agent:
        raw = supervisor_bench.restart_latencies(agent, "inventory", args.raw_kills, spacing_s=1.2)
    med = statistics.median
    results["worker_restart"] = {
        "kills": len(lat),
        "median_s": med(lat),
        "max_s": max(lat),
        "first_backoff_s": 0.0,
        "fork_to_running_median_s": med(raw),
        "fork_to_running_max_s": max(raw),
        "fork_kills": len(raw),
    }
    table.row(
        "worker restart after a first SIGKILL (median/max)",
        f"{med(lat) * 1000:.0f} / {max(lat) * 1000:.0f} ms ({len(lat)} kills)",
        f"goal median <= 150 ms; no backoff for a first failure (200 ms from the second); bare fork -> "
        f"first heartbeat {med(raw) * 1000:.1f} / {max(raw) * 1000:.1f} ms ({len(raw)} kills)",
    )


def footprint_section(table: Table, results: dict, args: argparse.Namespace, root: Path) -> None:
    """Issue 16's figures at the production intervals (bench/footprint_bench.py)."""
    binary = None
    if args.with_binary:  # the same enrolled agent restarted as the binary, beside each CPython
        from tests.support.systemdctr import agent_build

        binary = agent_build()
    fp = results["footprint"] = footprint_bench.measure(
        root, args.footprint_window, args.managed, args.managed_ray, args.footprint_runs, binary
    )
    footprint_bench.report(fp, table.row)


def logs_section(table: Table, results: dict, args: argparse.Namespace, root: Path) -> None:
    journal = logs_bench.build_journal(root, args.log_lines)
    alone_s, alone_cpu = logs_bench.journalctl_alone(journal)
    (root / "ship").mkdir()
    shipped = logs_bench.ship(journal, args.log_lines, args.log_batch, root / "ship")
    alone_rate, rate = args.log_lines / alone_s, args.log_lines / shipped["seconds"]
    results["logs_throughput"] = {
        "lines": args.log_lines,
        "batch_size": args.log_batch,
        "journalctl_lines_per_s": round(alone_rate),
        "shipper_lines_per_s": round(rate),
        "ratio": rate / alone_rate,
        "worker_peak_rss_bytes": shipped["peak_rss"],
        "pushes": shipped["pushes"],
    }
    table.row(
        f"journald -> Loki receiver (batch {args.log_batch})",
        f"{rate:,.0f} lines/s ({args.log_lines} lines)",
        f"journalctl --output=json alone {alone_rate:,.0f} lines/s: ratio {rate / alone_rate:.2f}",
    )


def start_section(table: Table, results: dict, args: argparse.Namespace, root: Path) -> None:
    """The start's CPU, whole tree to every worker RUNNING (bench/start_bench.py)."""
    start = results["start"] = start_bench.measure(root, sys.executable, args.starts, 5.0)
    start_bench.report(start, table.row)


def promtail_section(table: Table, results: dict, args: argparse.Namespace, root: Path) -> None:
    """The agent's whole tree beside Promtail 2.8.0 into a real Loki 3.4.6, in rounds
    (bench/logs_bench.py): CPU with the start included."""
    from tests.support import testtools
    from tests.support.lokiproc import LokiProcess

    for tool in ("loki-3.4.6", "promtail-2.8.0"):
        testtools.require(tool)
    journal = logs_bench.build_journal(root, args.promtail_lines)
    shape = argparse.Namespace(entries=args.promtail_lines, loki_batch_100=False, json_too=False)
    with LokiProcess("3.4.6", root / "loki" / "data") as loki:
        ratios = [
            logs_bench.loki_round(journal, shape, loki, root / f"round{n}", 1.0, n) for n in range(1, args.rounds + 1)
        ]
    results["promtail"] = {"lines": args.promtail_lines, "ratios": ratios}
    table.row(
        "log path: agent tree / Promtail 2.8.0 CPU",
        f"{statistics.median(r[0] for r in ratios):.2f}x (median of {len(ratios)})",
        f"runs {', '.join(f'{r[0]:.2f}' for r in ratios)}; log worker + journalctl alone "
        f"{statistics.median(r[1] for r in ratios):.2f}x; wall {statistics.median(r[2] for r in ratios):.2f}x; "
        "goal <= 0.8x",
    )


def inventory_section(table: Table, results: dict, args: argparse.Namespace, root: Path) -> None:
    inv = results["inventory"] = inventory_bench.measure(args.runs)
    table.row(
        "inventory: full record build (median)",
        f"{inv['full_build_median_ms']:.1f} ms ({inv['runs']} builds)",
        f"docker probe alone {inv['probe_median_ms'].get('docker', 0):.1f} ms",
    )
    table.row(
        "inventory: record size on the wire",
        f"{inv['full_record_bytes']} B full",
        f"'unchanged' record {inv['unchanged_record_bytes']} B",
    )


def binary_section(table: Table, results: dict, args: argparse.Namespace, root: Path) -> None:
    from bench import packaging_bench  # needs PyInstaller only when asked for

    pk = results["packaging"] = packaging_bench.measure(runs=10, settle_s=8.0)
    table.row("binary: size", f"{pk['binary_bytes'] / 2**20:.1f} MiB", "pip install: no single file to compare")
    table.row(
        "binary: --version (median)",
        f"{pk['binary_version_median_s'] * 1000:.0f} ms",
        f"pip install {pk['pip_version_median_s'] * 1000:.0f} ms",
    )
    table.row(
        "binary: ps (median)",
        f"{pk['binary_ps_median_s'] * 1000:.0f} ms",
        f"pip install {pk['pip_ps_median_s'] * 1000:.0f} ms",
    )
    table.row(
        "binary: idle tree PSS",
        f"{pk['binary_idle_tree_pss_kib'] / 1024:.1f} MiB",
        f"pip install {pk['pip_idle_tree_pss_kib'] / 1024:.1f} MiB",
    )
    table.row(
        "binary: idle tree, distinct resident pages",
        f"{pk['binary_idle_tree_resident_kib'] / 1024:.1f} MiB",
        f"pip install {pk['pip_idle_tree_resident_kib'] / 1024:.1f} MiB",
    )


# ---------------------------------------------------------------- main


def fmt_lateness(figures: dict) -> str:
    return (
        f"{figures['lateness_p50_ms']:.0f} / {figures['lateness_p99_ms']:.0f} / {figures['lateness_max_ms']:.0f} ms"
        f" ({figures['beats']} beats, {figures['skipped_beats']} skipped)"
    )


def not_measured(table: Table, results: dict, key: str, exc: BaseException) -> None:
    results.setdefault("not_measured", {})[key] = f"{type(exc).__name__}: {exc}"
    table.row(key, "NOT MEASURED", f"{type(exc).__name__}: {str(exc)[:120]}")
    traceback.print_exc(file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shorter windows and fewer samples (about 3 minutes)")
    parser.add_argument("--with-binary", action="store_true", help="also build and measure the PyInstaller binary")
    parser.add_argument("--json", type=Path, default=Path("bench/results/all.json"))
    parser.add_argument(
        "--only",
        help="comma-separated sections to run (agent,footprint,restart,logs,inventory,start,promtail,binary)",
    )
    parser.add_argument(
        "--write-docs",
        action="store_true",
        help="merge what was measured into bench/figures.json and rewrite the tables README.md and "
        "docs/benchmarks.md quote (bench/figures.py)",
    )
    parser.add_argument("--docs-only", action="store_true", help="only rewrite those tables from bench/figures.json")
    args = parser.parse_args()
    if args.docs_only:
        changed = figures.write_docs(figures.load())
        print(f"rewritten: {', '.join(changed) or 'nothing (already current)'}")
        return 0
    quick = args.quick
    args.settle = 5.0
    args.idle_window = 20.0 if quick else 60.0
    args.stop_s = 8.0 if quick else 15.0
    args.flood_lines = 50_000 if quick else 200_000
    args.runs = 5 if quick else 20
    args.backlog = 2_000 if quick else 10_000
    args.kills = 15 if quick else 50
    args.raw_kills = 5 if quick else 10
    args.log_lines = 50_000 if quick else 200_000
    args.log_batch = 1000  # the default LOG_BATCH_SIZE
    args.footprint_window = 40.0 if quick else 120.0  # >= 120 s sees two inventory cycles and 8 heartbeats
    args.managed, args.managed_ray = 20, 5
    args.footprint_runs = 5 if quick else 10
    args.starts = 5
    args.rounds = 3 if quick else 5
    args.promtail_lines = 100_000

    every: dict[str, Callable[..., None]] = {
        "agent": agent_section,
        "footprint": footprint_section,
        "restart": restart_section,
        "logs": logs_section,
        "inventory": inventory_section,
        "start": start_section,
        "promtail": promtail_section,
        "binary": binary_section,
    }
    chosen = (
        args.only.split(",")
        if args.only
        else ["agent", "footprint", "restart", "logs", "inventory", "start", "promtail"]
        + (["binary"] if args.with_binary else [])
    )
    unknown = [n for n in chosen if n not in every]
    if unknown:
        parser.error(f"unknown section(s) {unknown}; choose from {list(every)}")
    sections = [(n, every[n]) for n in chosen]
    results: dict[str, Any] = {
        "quick": quick,
        "started_at": time.time(),
        "heartbeat_interval_s": HEARTBEAT_S,
        "cpus": os.cpu_count(),
        "sections_s": {},
    }
    table = Table()
    print(f"faden-agent benchmarks ({'quick' if quick else 'full'} run, {os.cpu_count()} CPUs)")
    print(f"{'figure':<46} {'value':<40} compared with (same run)")
    measured = {}
    for name, section in sections:
        began = time.monotonic()
        measured[name] = measurement_record()
        with tempfile.TemporaryDirectory(prefix=f"faden-bench-{name}-") as tmp:
            try:
                section(table, results, args, Path(tmp))
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - one section failing must not hide the others
                not_measured(table, results, name, exc)
        results["sections_s"][name] = round(time.monotonic() - began, 1)
    results["table"] = [{"figure": f, "value": v, "compared_with": c} for f, v, c in table.rows]
    results["duration_s"] = round(time.time() - results["started_at"], 1)
    print(f"total {results['duration_s']:.0f} s; sections {results['sections_s']}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(f"JSON: {args.json}")
    if args.write_docs:
        write_figures(results, measured)
    return 1 if results.get("not_measured") else 0


def measurement_record() -> dict[str, str]:
    """When and where a section measured: the date, the commit (+ "with changes" when the tree
    has uncommitted ones) and the load average at its start."""
    repo = Path(__file__).resolve().parents[1]
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--", "faden_agent"], capture_output=True)
    return {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "commit": commit.stdout.strip() + (" with changes" if dirty.stdout.strip() else ""),
        "load": f"{os.getloadavg()[0]:.1f}",
    }


def write_figures(results: dict[str, Any], measured: dict[str, dict[str, str]]) -> None:
    """What this run measured into bench/figures.json, then the documents' tables from it."""
    old = figures.load()
    for key, value in figures.from_results(results).items():
        old = figures.merged(old, {key: value}, measured[figures.SECTION_OF[key]])
    figures.FIGURES.write_text(json.dumps(old, indent=1, sort_keys=True) + "\n")
    changed = figures.write_docs(old)
    print(f"{figures.FIGURES.relative_to(figures.REPO)} updated; rewritten: {', '.join(changed) or 'nothing'}")


if __name__ == "__main__":
    sys.exit(main())
