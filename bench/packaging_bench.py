"""Standalone binary vs pip install (issue 7): size, `--version` start time (median of N),
PSS of the idle process tree (every process of the agent, measured side by side).

    python bench/packaging_bench.py [--runs 10] [--json bench/results/packaging.json]

Builds the binary with packaging/build.sh when it is missing or stale. The idle agents
point at a closed port (the stream worker backs off), so no backend is involved.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.supervisor_bench import pss_kib  # noqa: E402
from tests.agentproc import AgentProcess, agent_env  # noqa: E402
from tests.systemdctr import agent_build  # noqa: E402


def start_times(argv: list[str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        begin = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        out.append(time.perf_counter() - begin)
    return out


def idle_tree_pss_kib(argv: list[str], settle_s: float) -> tuple[int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        env = agent_env(Path(tmp), backend_url="http://127.0.0.1:9", worker_heartbeat_sec=1, worker_hang_timeout_sec=10)
        agent = AgentProcess(env, Path(tmp) / "agent.log", argv=argv)
        agent.start()
        try:
            time.sleep(settle_s)
            root = psutil.Process(agent.pid)
            procs = [root, *root.children(recursive=True)]
            return sum(pss_kib(p.pid) for p in procs), len(procs)
        finally:
            agent.stop()
            agent.kill()


def measure(runs: int, settle_s: float) -> dict[str, object]:
    """Builds the binary if needed; prints and returns size, start times and idle tree PSS of both."""
    binary = agent_build()
    console = shutil.which("faden-agent")
    if console is None:
        sys.exit("no `faden-agent` on PATH: pip install -e . first")
    variants = {"binary": [str(binary)], "pip": [console]}
    results: dict[str, object] = {"binary_bytes": binary.stat().st_size}
    print(f"binary {binary}: {binary.stat().st_size / 2**20:.1f} MiB")
    for name, argv in variants.items():
        times = start_times([*argv, "--version"], runs)
        results[f"{name}_version_median_s"] = statistics.median(times)
        print(f"{name:<6} --version  median {statistics.median(times) * 1000:7.1f} ms  "
              f"(min {min(times) * 1000:.1f}, max {max(times) * 1000:.1f}, n={len(times)})")
    for name, argv in variants.items():
        pss, count = idle_tree_pss_kib([*argv, "run"], settle_s)
        results[f"{name}_idle_tree_pss_kib"] = pss
        results[f"{name}_idle_tree_processes"] = count
        print(f"{name:<6} idle tree  PSS {pss / 1024:7.1f} MiB over {count} processes")
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--settle", type=float, default=8.0, help="seconds the tree idles before PSS is read")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    results = measure(args.runs, args.settle)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
