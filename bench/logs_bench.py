"""Log shipper throughput, side by side in one run.

Builds a journal file of N entries (systemd-journal-remote), then measures:
  1. `journalctl --directory=D --output=json --all` alone, to /dev/null: lines/s;
  2. the real agent (`faden-agent run`, log worker) shipping the same file into a
     Loki-compatible receiver (tests/lokireceiver.py, in this process): lines/s from the
     worker's start until the receiver holds every line, per batch size;
and prints the ratio (shipper / journalctl), CPU seconds per 100,000 lines of the log
worker (Python) and of its journalctl child, and the worker's peak RSS.

    python bench/logs_bench.py [--entries 200000] [--batch-sizes 100,1000]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.agentproc import AgentProcess, agent_env, wait_for  # noqa: E402
from tests.journalfiles import JournalWriter  # noqa: E402
from tests.lokireceiver import LokiReceiver  # noqa: E402


LINE_PREFIX = "bench line "


def build_journal(root: Path, entries: int) -> JournalWriter:
    journal = JournalWriter(root / "journal")
    append_lines(journal, entries)
    return journal


def append_lines(journal: JournalWriter, entries: int) -> None:
    """Appends `entries` numbered lines of about 100 bytes, 50,000 per export."""
    chunk = 50_000
    for start in range(0, entries, chunk):
        journal.append([journal.entry(f"{LINE_PREFIX}{i:07d} " + "payload " * 8, 6,
                                      _SYSTEMD_UNIT="bench.service", _PID="4242", SYSLOG_IDENTIFIER="bench")
                        for i in range(start, min(entries, start + chunk))])


def bench_lines(loki: LokiReceiver) -> int:
    """Distinct journal lines of this bench the receiver holds (managed containers of other
    work on the shared engine are shipped too, and are not counted)."""
    return len({e.line for e in loki.entries() if e.line.startswith(LINE_PREFIX)})


def journalctl_alone(journal: JournalWriter) -> tuple[float, float]:
    """(seconds, CPU seconds) for journalctl to write the whole file as JSON."""
    started = time.monotonic()
    before = psutil.Process().cpu_times()
    subprocess.run(["journalctl", f"--directory={journal.directory}", "--output=json", "--all", "--no-pager"],
                   stdout=subprocess.DEVNULL, check=True)
    after = psutil.Process().cpu_times()
    return time.monotonic() - started, (after.children_user + after.children_system) - (before.children_user + before.children_system)


def ship(journal: JournalWriter, entries: int, batch_size: int, root: Path) -> dict[str, float]:
    with LokiReceiver() as loki:
        env = agent_env(root, loki_url=loki.url, journal_directory=journal.directory, agent_id="bench",
                        log_batch_size=batch_size, log_flush_interval_sec=0.5)
        with AgentProcess(env, root / "agent.log") as agent:
            pid = wait_for(lambda: (agent.workers().get("logs") or {}).get("pid"), 10, what="log worker")
            worker = psutil.Process(pid)
            started = worker.create_time()
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
            assert bench_lines(loki) == entries, "lines missing"
            return {"seconds": took, "worker_cpu": cpu.user + cpu.system, "journalctl_cpu": journalctl_cpu,
                    "peak_rss": peak_rss, "pushes": loki.pushes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--batch-sizes", default="100,1000")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="faden-logs-bench-"))
    try:
        t0 = time.monotonic()
        journal = build_journal(root, args.entries)
        print(f"journal of {args.entries} entries built in {time.monotonic() - t0:.1f}s "
              f"({journal.path.stat().st_size / 2**20:.0f} MiB)")
        alone_s, alone_cpu = journalctl_alone(journal)
        alone_rate = args.entries / alone_s
        print(f"journalctl --output=json alone:  {alone_rate:10,.0f} lines/s  ({alone_s:.2f}s, "
              f"{alone_cpu / args.entries * 1e5:.2f} CPU s per 100k lines)")
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            run_root = root / f"batch{batch}"
            run_root.mkdir()
            r = ship(journal, args.entries, batch, run_root)
            rate = args.entries / r["seconds"]
            print(f"shipper, LOG_BATCH_SIZE={batch:<5}   {rate:10,.0f} lines/s  ({r['seconds']:.2f}s, {r['pushes']} pushes)"
                  f"  ratio {rate / alone_rate:.2f}"
                  f"  | CPU s per 100k lines: worker {r['worker_cpu'] / args.entries * 1e5:.2f}, "
                  f"journalctl {r['journalctl_cpu'] / args.entries * 1e5:.2f}"
                  f"  | peak RSS {r['peak_rss'] / 2**20:.1f} MiB")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
