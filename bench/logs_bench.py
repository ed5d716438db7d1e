"""Log shipper throughput, side by side in one run.

Builds a journal file of N entries (systemd-journal-remote), then measures, one after the
other on the same file:
  1. `journalctl --directory=D --output=json --all` alone, to /dev/null;
  2. the real agent (`faden-agent run`, log worker, default settings unless --batch-sizes)
     shipping it into the project's receiver (tests/support/lokireceiver.py, in this process);
  3. the same agent shipping it into a real Loki 3.4.6 (tests/support/testtools.py), at defaults
     and at LOG_BATCH_SIZE=100 (the default before 1000);
  4. Promtail 2.8.0 (its journald target) shipping it into the same real Loki;
  5. that Loki's own ingest ceiling: pre-encoded pushes from 4 connections, nothing else;
and prints wall time (from the shipper's start until the target holds every line), CPU
seconds (shipper + its journalctl child), lines/s and the ratio to journalctl alone; for the
receiver runs also when the first push was answered (the agent's start-up: its other workers
start beside the log worker on the same cores) and the ratio from then on; for the agent
into Loki its push retries by status, with Loki's words for the first (from the agent's log).

    python bench/logs_bench.py [--entries 100000] [--batch-sizes default,100] [--no-loki] [--rounds 5]
                               [--loki-batch-100] [--json-too]

Into Loki, each round runs the agent (production intervals) then Promtail: CPU is the agent's
whole tree from exec (its start included) against Promtail's process, and the log worker
with its journalctl alone beside it; the rounds' medians close the table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import footprint_bench, interpreters
from bench.cputime import cpu_group, group_cpu_s, in_group, process_cpu_s
from tests.support import testtools
from tests.support.agentproc import AgentProcess, agent_env, wait_for
from tests.support.journalfiles import JournalWriter
from tests.support.lokiproc import LokiProcess, count
from tests.support.lokireceiver import LokiReceiver

LINE_PREFIX = "bench line "
RECEIVED_METRIC = "loki_distributor_lines_received_total"
# The journal alone, as Promtail gets it: no Docker engine, so the managed containers of
# other work on a shared engine add no lines (a foreign line makes the journal's last batch
# a partial one, which then waits LOG_FLUSH_INTERVAL_SEC: 5 s more in such a run).
ISOLATED = {"docker_host": "unix:///nonexistent/docker.sock"}
WAIT_S = 300.0  # for the lines at Loki: a run that loses lines fails instead of hanging


def build_journal(root: Path, entries: int) -> JournalWriter:
    journal = JournalWriter(root / "journal")
    append_lines(journal, entries)
    return journal


def append_lines(journal: JournalWriter, entries: int) -> None:
    """Appends `entries` numbered lines of about 100 bytes, 50,000 per export."""
    chunk = 50_000
    for start in range(0, entries, chunk):
        journal.append(
            [
                journal.entry(
                    f"{LINE_PREFIX}{i:07d} " + "payload " * 8,
                    6,
                    _SYSTEMD_UNIT="bench.service",
                    _PID="4242",
                    SYSLOG_IDENTIFIER="bench",
                )
                for i in range(start, min(entries, start + chunk))
            ]
        )


def bench_lines(loki: LokiReceiver) -> int:
    """Distinct journal lines of this bench the receiver holds (managed containers of other
    work on the shared engine are shipped too, and are not counted)."""
    return len({e.line for e in loki.entries() if e.line.startswith(LINE_PREFIX)})


def journalctl_alone(journal: JournalWriter) -> tuple[float, float]:
    """(seconds, CPU seconds) for journalctl to write the whole file as JSON."""
    started = time.monotonic()
    before = psutil.Process().cpu_times()
    subprocess.run(
        ["journalctl", f"--directory={journal.directory}", "--output=json", "--all", "--no-pager"],
        stdout=subprocess.DEVNULL,
        check=True,
    )
    after = psutil.Process().cpu_times()
    return time.monotonic() - started, (after.children_user + after.children_system) - (
        before.children_user + before.children_system
    )


# Into the receiver (Python, in the bench's own process) the agent pushes JSON: the receiver
# decodes that in C (orjson) and protobuf in Python, whose cost would be measured instead of
# the shipper's (the agent's own encoding costs about the same for either, docs/logs.md).
RECEIVER_FORMAT = {"loki_push_format": "json"}


def ship(journal: JournalWriter, entries: int, batch_size: int | None, root: Path) -> dict[str, float]:
    settings: dict[str, object] = {**RECEIVER_FORMAT, **({"log_batch_size": batch_size} if batch_size else {})}
    with LokiReceiver(version="3") as loki:
        first_push: list[float] = []  # when the first push was answered: the agent's start-up before it
        handle_push = loki.handle_push

        def timed_push(headers, raw):
            answer = handle_push(headers, raw)
            if not first_push:
                first_push.append(time.time())
            return answer

        loki.handle_push = timed_push
        env = agent_env(
            root, loki_url=loki.url, journal_directory=journal.directory, agent_id="bench", **ISOLATED, **settings
        )
        with AgentProcess(env, root / "agent.log") as agent:
            pid = wait_for(lambda: (agent.workers().get("logs") or {}).get("pid"), 10, what="log worker")
            worker = psutil.Process(pid)
            started = started_at(worker)
            peak_rss = 0
            journalctl_cpu = 0.0
            while loki.stats()["entries"] < entries or bench_lines(loki) < entries:
                peak_rss = max(peak_rss, worker.memory_info().rss)
                for child in worker.children():
                    try:
                        journalctl_cpu = max(journalctl_cpu, sum(child.cpu_times()[:2]))
                    except psutil.NoSuchProcess:
                        pass
                time.sleep(0.05)
            took = time.time() - started
            cpu = worker.cpu_times()
            journalctl_cpu = max(journalctl_cpu, children_cpu(worker))
            assert bench_lines(loki) == entries, "lines missing"
            return {
                "seconds": took,
                "first_push_s": first_push[0] - started,
                "worker_cpu": cpu.user + cpu.system,
                "journalctl_cpu": journalctl_cpu,
                "peak_rss": peak_rss,
                "pushes": loki.pushes,
            }


def started_at(process: psutil.Process) -> float:
    """When the process started (wall clock, to the kernel's 10 ms tick). psutil's
    create_time() adds the boot time, which the kernel gives in whole seconds: up to 1 s off
    (0.30 s early on the machine of the 1 Dec 2026 runs), which every shipper's time carried."""
    fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    since_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
    return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - since_boot)


def children_cpu(process: psutil.Process) -> float:
    total = 0.0
    for child in process.children():
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass
    return total


def wait_in_loki(
    loki: LokiProcess, selector: str, entries: int, proc: psutil.Process, before: dict[str, float]
) -> dict[str, float]:
    """Waits until Loki holds `entries` lines for selector; CPU of proc and its children
    sampled until then (a child that exits takes its CPU with it: sampled often), and what
    Loki itself spent meanwhile. The end is seen on Loki's cheap counter of lines received
    (its /metrics); a count_over_time query then confirms them stored (such a query scans
    the lines: polling with it would cost Loki CPU in proportion to the wait). `before`:
    loki_state() taken before the shipper started."""
    child_cpu = 0.0
    deadline = time.monotonic() + WAIT_S
    while loki.metrics_value(RECEIVED_METRIC) - before["received"] < entries:
        child_cpu = max(child_cpu, children_cpu(proc))
        if time.monotonic() > deadline:
            raise TimeoutError(f"Loki did not receive {entries} lines within {WAIT_S}s")
        time.sleep(0.05)
    end = time.time()
    while count(loki, selector, "3h") < entries:  # received but not yet stored (or refused)
        if time.monotonic() > deadline:
            raise TimeoutError(f"Loki did not store {entries} lines for {selector} within {WAIT_S}s")
        time.sleep(0.2)
        end = time.time()
    child_cpu = max(child_cpu, children_cpu(proc))
    cpu = proc.cpu_times()
    return {
        "end": end,
        "cpu": cpu.user + cpu.system,
        "child_cpu": child_cpu,
        "loki_cpu": loki_cpu(loki) - before["cpu"],
    }


def loki_state(loki: LokiProcess) -> dict[str, float]:
    return {"received": loki.metrics_value(RECEIVED_METRIC), "cpu": loki_cpu(loki)}


def loki_cpu(loki: LokiProcess) -> float:
    assert loki.proc is not None
    times = psutil.Process(loki.proc.pid).cpu_times()
    return times.user + times.system


def agent_into_loki(
    journal: JournalWriter,
    entries: int,
    loki: LokiProcess,
    root: Path,
    batch_size: int | None = None,
    push_format: str | None = None,
) -> dict[str, float]:
    """The agent at production intervals (footprint_bench.PRODUCTION_DEFAULTS: no peer
    worker, 3 s liveness) shipping the journal into Loki. "cpu": the log worker and its
    journalctl; "tree_cpu": the whole tree from exec, its start included (a cpuacct cgroup,
    bench/cputime.py; summed ticks of the live processes where there is none)."""
    agent_id = f"bench-agent-{batch_size or 'default'}-{push_format or 'default'}-{root.name}"
    settings: dict[str, object] = {"log_batch_size": batch_size} if batch_size else {}
    if push_format:
        settings["loki_push_format"] = push_format
    env = agent_env(
        root, loki_url=loki.url, journal_directory=journal.directory, agent_id=agent_id, **ISOLATED, **settings
    )
    for name in footprint_bench.PRODUCTION_DEFAULTS:
        env.pop(f"FADEN_NODE_AGENT_{name.upper()}", None)
    env = interpreters.as_service(env)
    before = loki_state(loki)
    with cpu_group() as group:
        argv = in_group(group, [sys.executable, "-m", "faden_agent", "run"])
        with AgentProcess(env, root / "agent.log", argv=argv) as agent:
            worker = psutil.Process(
                wait_for(lambda: (agent.workers().get("logs") or {}).get("pid"), 10, what="log worker")
            )
            done = wait_in_loki(
                loki, f'{{agent_id="{agent_id}", container="node-{agent_id}"}}', entries, worker, before
            )
            per_process = {name: process_cpu_s(pid) for name, pid in footprint_bench.named_tree(agent).items()}
            tree_cpu = group_cpu_s(group) if group is not None else sum(per_process.values())
            return {
                "seconds": done["end"] - started_at(worker),
                "cpu": done["cpu"] + done["child_cpu"],
                "tree_cpu": tree_cpu,
                "tree_cpu_precise": group is not None,
                "per_process_cpu": per_process,
                "loki_cpu": done["loki_cpu"],
                "retries": retries_text(agent.workers()["logs"]["status"], root / "agent.log"),
            }


def retries_text(status: dict, agent_log: Path) -> str:
    """The push retries by status, with Loki's words for the first failed push (its log)."""
    by_status = status.get("push_retries_by_status") or {}
    if not by_status:
        return "no push retries"
    counts = ", ".join(f"{n} x {kind}" for kind, n in sorted(by_status.items()))
    failed = [line for line in agent_log.read_text(errors="replace").splitlines() if "logs: push to" in line]
    return f"push retries: {counts} ({failed[0].split('failed', 1)[-1].strip()[:240] if failed else '-'})"


PROMTAIL_CONFIG = """server:
  {{http_listen_address: 127.0.0.1, http_listen_port: 0, grpc_listen_address: 127.0.0.1, grpc_listen_port: 0}}
positions: {{filename: {root}/positions.yaml}}
clients: [{{url: "{url}/loki/api/v1/push"}}]
scrape_configs:
  - job_name: journal
    journal: {{path: {journal}, max_age: 12h, labels: {{job: promtail-bench}}}}
    relabel_configs:
      - {{source_labels: [__journal_priority_keyword], target_label: level}}
"""


def promtail_into_loki(journal: JournalWriter, entries: int, loki: LokiProcess, root: Path) -> dict[str, float] | None:
    binary = testtools.tool_path("promtail-2.8.0")
    if binary is None:
        return None
    config = root / "promtail.yaml"
    config.write_text(PROMTAIL_CONFIG.format(root=root, url=loki.url, journal=journal.directory))
    before = loki_state(loki)
    with open(root / "promtail.log", "wb") as log:
        proc = subprocess.Popen([str(binary), f"-config.file={config}"], stdout=log, stderr=subprocess.STDOUT)
    try:
        process = psutil.Process(proc.pid)
        done = wait_in_loki(loki, '{job="promtail-bench"}', entries, process, before)
        return {
            "seconds": done["end"] - started_at(process),
            "cpu": done["cpu"] + done["child_cpu"],
            "loki_cpu": done["loki_cpu"],
        }
    finally:
        proc.terminate()
        proc.wait(10)


def loki_ceiling(loki: LokiProcess, lines: int = 200_000, batch: int = 1000, connections: int = 4) -> dict[str, float]:
    """Loki's own ingest rate here: pre-encoded, gzipped 1000-line pushes (lines like the
    bench's) from `connections` threads; the client's work is only the HTTP POST."""
    import concurrent.futures
    import gzip

    import orjson
    import requests

    now = time.time_ns()
    bodies = [
        gzip.compress(
            orjson.dumps(
                {
                    "streams": [
                        {
                            "stream": {"job": "ceiling", "part": str(start % connections)},
                            "values": [
                                [str(now + i), f"{LINE_PREFIX}{i:07d} " + "payload " * 8]
                                for i in range(start, start + batch)
                            ],
                        }
                    ]
                }
            ),
            1,
        )
        for start in range(0, lines, batch)
    ]
    session = requests.Session()
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}

    def post(body: bytes) -> None:
        while session.post(f"{loki.url}/loki/api/v1/push", data=body, headers=headers, timeout=60).status_code != 204:
            time.sleep(0.05)

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(connections) as pool:
        list(pool.map(post, bodies))
    took = time.monotonic() - started
    return {"seconds": took, "lines": lines}


def loki_round(
    journal: JournalWriter, args: argparse.Namespace, loki: LokiProcess, root: Path, alone_rate: float, round_: int
) -> tuple[float, float, float]:
    """One agent run (defaults; also batch 100 and JSON when asked) and one Promtail run
    into the same Loki; (tree CPU ratio, log worker CPU ratio, wall ratio), agent / Promtail."""
    root.mkdir()
    (root / "agent").mkdir()
    r = agent_into_loki(journal, args.entries, loki, root / "agent")
    precise = "" if r["tree_cpu_precise"] else " (ticks of live processes)"
    row(
        f"{round_}: faden-agent -> Loki 3.4.6 (defaults)",
        args.entries,
        r["seconds"],
        r["tree_cpu"],
        alone_rate,
        f"whole tree from exec{precise} ("
        + ", ".join(f"{name.split(' (')[0]} {cpu:.2f}" for name, cpu in r["per_process_cpu"].items())
        + f"); log worker + journalctl {r['cpu']:.2f} CPU s; Loki {r['loki_cpu']:.2f} CPU s, {r['retries']}",
    )
    extra = [("LOG_BATCH_SIZE=100", {"batch_size": 100})] if args.loki_batch_100 else []
    extra += [("LOKI_PUSH_FORMAT=json", {"push_format": "json"})] if args.json_too else []
    for name, options in extra:
        (root / name).mkdir()
        other = agent_into_loki(journal, args.entries, loki, root / name, **options)
        row(
            f"{round_}: faden-agent -> Loki 3.4.6, {name}",
            args.entries,
            other["seconds"],
            other["tree_cpu"],
            alone_rate,
            f"log worker + journalctl {other['cpu']:.2f} CPU s; Loki {other['loki_cpu']:.2f} CPU s, {other['retries']}",
        )
    (root / "promtail").mkdir()
    p = promtail_into_loki(journal, args.entries, loki, root / "promtail")
    if p is None:
        print(f"Promtail 2.8.0: {testtools.why_missing('promtail-2.8.0')}")
        return (float("nan"),) * 3
    ratios = (r["tree_cpu"] / p["cpu"], r["cpu"] / p["cpu"], r["seconds"] / p["seconds"])
    row(
        f"{round_}: Promtail 2.8.0 (journald) -> Loki 3.4.6",
        args.entries,
        p["seconds"],
        p["cpu"],
        alone_rate,
        f"Loki {p['loki_cpu']:.2f} CPU s; faden-agent / Promtail: CPU {ratios[0]:.2f}x (its log worker alone "
        f"{ratios[1]:.2f}x), wall {ratios[2]:.2f}x; load average {os.getloadavg()[0]:.1f}",
    )
    return ratios


def row(name: str, entries: int, seconds: float, cpu: float | None, alone_rate: float, note: str = "") -> None:
    rate = entries / seconds
    cpu_text = f"{cpu:6.2f}" if cpu is not None else "     -"
    print(f"{name:<44} {seconds:7.2f} {cpu_text} {rate:10,.0f} {rate / alone_rate:6.2f}  {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument(
        "--batch-sizes",
        default="default,100",
        help="comma-separated LOG_BATCH_SIZE values for the receiver runs (empty: none)",
    )
    parser.add_argument("--no-loki", action="store_true", help="only journalctl and the receiver")
    parser.add_argument("--rounds", type=int, default=5, help="agent and Promtail into Loki, one after the other")
    parser.add_argument("--loki-batch-100", action="store_true", help="also the agent at LOG_BATCH_SIZE=100 into Loki")
    parser.add_argument(
        "--json-too", action="store_true", help="also the agent pushing gzip'd JSON (LOKI_PUSH_FORMAT=json) into Loki"
    )
    args = parser.parse_args()
    interpreters.compile_agent(sys.executable)
    root = Path(tempfile.mkdtemp(prefix="faden-logs-bench-"))
    try:
        t0 = time.monotonic()
        journal = build_journal(root, args.entries)
        print(
            f"journal of {args.entries} entries built in {time.monotonic() - t0:.1f}s "
            f"({journal.path.stat().st_size / 2**20:.0f} MiB); load average {os.getloadavg()[0]:.1f}"
        )
        print(f"{'':<44} {'wall s':>7} {'CPU s':>6} {'lines/s':>10} {'ratio':>6}")
        alone_s, alone_cpu = journalctl_alone(journal)
        alone_rate = args.entries / alone_s
        row("journalctl --output=json alone", args.entries, alone_s, alone_cpu, alone_rate)
        for batch in filter(None, args.batch_sizes.split(",")):
            size = None if batch == "default" else int(batch)
            run_root = root / f"batch{batch}"
            run_root.mkdir()
            r = ship(journal, args.entries, size, run_root)
            row(
                f"faden-agent -> receiver, LOG_BATCH_SIZE={batch}",
                args.entries,
                r["seconds"],
                r["worker_cpu"] + r["journalctl_cpu"],
                alone_rate,
                f"{r['pushes']} pushes, journalctl {r['journalctl_cpu']:.2f} CPU s,"
                f" peak RSS {r['peak_rss'] / 2**20:.0f} MiB; first push answered at {r['first_push_s']:.2f} s"
                f" (the agent's start-up, its other workers too), after it"
                f" {args.entries / (r['seconds'] - r['first_push_s']) / alone_rate:.2f}x",
            )
        if args.no_loki:
            return
        if testtools.tool_path("loki-3.4.6") is None:
            print(f"Loki 3.4.6: {testtools.why_missing('loki-3.4.6')}")
            return
        with LokiProcess("3.4.6", root / "loki" / "data") as loki:
            ratios = []
            for round_ in range(1, args.rounds + 1):
                ratios.append(loki_round(journal, args, loki, root / f"round{round_}", alone_rate, round_))
            if ratios:
                runs = ", ".join(f"{r[0]:.2f}" for r in ratios)
                print(
                    f"median of {len(ratios)} rounds: agent tree / Promtail CPU "
                    f"{statistics.median(r[0] for r in ratios):.2f}x (runs {runs}), "
                    f"log worker + journalctl / Promtail {statistics.median(r[1] for r in ratios):.2f}x, "
                    f"wall {statistics.median(r[2] for r in ratios):.2f}x; load average {os.getloadavg()[0]:.1f}"
                )
            c = loki_ceiling(loki)
            row("Loki 3.4.6 ingest ceiling (4 conns, 1000/push)", c["lines"], c["seconds"], None, alone_rate)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
