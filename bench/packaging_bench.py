"""Standalone binary vs pip install (issues 7, 17): size, `--version` and `ps` wall time
(median of N; `ps` asks the idle running agent), PSS of the idle process tree (every
process of the agent, measured side by side).

    python bench/packaging_bench.py [--runs 10] [--json bench/results/packaging.json]
                                    [--compare OLD_BINARY]   # e.g. a build of an older commit

Builds the binary with packaging/build.sh when it is missing or stale, and starts it once
before timing (its first start unpacks the build: that is not what repeated starts cost).
The idle agents point at a closed port (the stream worker backs off), so no backend is
involved.
"""

from __future__ import annotations

import argparse
import array
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

PAGE = os.sysconf("SC_PAGE_SIZE")
PFN_MASK = (1 << 55) - 1

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.supervisor_bench import pss_kib  # noqa: E402
from tests.support.agentproc import AgentProcess, agent_env  # noqa: E402
from tests.support.systemdctr import agent_build  # noqa: E402


def tree_resident_kib(pids: list[int]) -> int:
    """Resident memory of the tree, each physical page counted once (needs root: PFNs).

    PSS divides a shared page by every process on the machine that maps it, so a pip
    install's libpython and OpenSSL look cheap on a machine full of other Python processes
    (this one), while the binary's own copies are charged to it alone. Counting the tree's
    distinct pages is what PSS reads on a node where the agent is the only Python program.
    """
    pages: set[int] = set()
    for pid in pids:
        with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pagemap:
            for line in maps:
                start, end = (int(x, 16) for x in line.split()[0].split("-"))
                if line.rstrip().endswith("[vsyscall]"):
                    continue
                pagemap.seek(start // PAGE * 8)
                entries = array.array("Q", pagemap.read((end - start) // PAGE * 8))
                pages.update(e & PFN_MASK for e in entries if e >> 63)  # bit 63: present
    return len(pages) * PAGE // 1024


def start_times(argv: list[str], runs: int, env: dict[str, str] | None = None) -> tuple[list[float], list[float]]:
    """Wall time and CPU time (user + system of the command and its children) per run: on
    a loaded machine the wall time also measures the neighbours, the CPU time does not."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        begin = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, env=env)
        walls.append(time.perf_counter() - begin)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return walls, cpus


def report_times(results: dict[str, object], key: str, label: str, times: tuple[list[float], list[float]]) -> None:
    walls, cpus = times
    results[f"{key}_median_s"] = statistics.median(walls)
    results[f"{key}_cpu_median_s"] = statistics.median(cpus)
    print(
        f"{label:<28} median {statistics.median(walls) * 1000:7.1f} ms  "
        f"(min {min(walls) * 1000:.1f}, max {max(walls) * 1000:.1f}, n={len(walls)}); "
        f"CPU median {statistics.median(cpus) * 1000:.1f} ms"
    )


def idle_tree(name: str, argv: list[str], runs: int, settle_s: float, results: dict[str, object]) -> None:
    """Starts `argv run`, lets it idle, reads the tree's PSS, then times `argv ps` against it."""
    with tempfile.TemporaryDirectory() as tmp:
        # The peer worker as in production, on demand (agent_env starts every worker, as tests
        # expect): the tree is the supervisor, the four workers and journalctl, as in
        # footprint_bench, whose goal it is measured against.
        env = agent_env(
            Path(tmp),
            backend_url="http://127.0.0.1:9",
            worker_liveness_sec=1,
            worker_hang_timeout_sec=10,
            peer_start="on_demand",
        )
        agent = AgentProcess(env, Path(tmp) / "agent.log", argv=[*argv, "run"])
        agent.start()
        try:
            time.sleep(settle_s)
            root = psutil.Process(agent.pid)
            procs = [root, *root.children(recursive=True)]
            pss = sum(pss_kib(p.pid) for p in procs)
            resident = tree_resident_kib([p.pid for p in procs])
            results[f"{name}_idle_tree_pss_kib"] = pss
            results[f"{name}_idle_tree_resident_kib"] = resident
            results[f"{name}_idle_tree_processes"] = len(procs)
            print(
                f"{name + ' idle tree PSS':<28} {pss / 1024:7.1f} MiB over {len(procs)} processes; "
                f"distinct resident pages {resident / 1024:.1f} MiB"
            )
            report_times(results, f"{name}_ps", f"{name} ps", start_times([*argv, "ps"], runs, env))
        finally:
            agent.stop()
            agent.kill()


def measure(runs: int, settle_s: float, compare: Path | None = None) -> dict[str, object]:
    """Builds the binary if needed; prints and returns size, start times and idle tree PSS of each."""
    binary = agent_build()
    console = shutil.which("faden-agent")
    if console is None:
        sys.exit("no `faden-agent` on PATH: pip install -e . first")
    variants = {"binary": [str(binary)], "pip": [console]}
    if compare is not None:
        variants["compare"] = [str(compare.resolve())]
    results: dict[str, object] = {}
    for name, argv in variants.items():
        if name != "pip":
            size = Path(argv[0]).stat().st_size
            results[f"{name}_bytes"] = size
            print(f"{name} {argv[0]}: {size / 2**20:.1f} MiB")
            subprocess.run([*argv, "--version"], check=True, capture_output=True)  # the one unpacking start
    for name, argv in variants.items():
        report_times(results, f"{name}_version", f"{name} --version", start_times([*argv, "--version"], runs))
    for name, argv in variants.items():
        idle_tree(name, argv, runs, settle_s, results)
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--settle", type=float, default=8.0, help="seconds the tree idles before PSS is read")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--compare", type=Path, help="another standalone binary to measure beside them")
    args = parser.parse_args()

    results = measure(args.runs, args.settle, args.compare)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
