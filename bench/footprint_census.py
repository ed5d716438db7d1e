"""What is left of the idle tree's memory and the start, three ways (docs/benchmarks.md, round 12):

  stand-ins  the supervisor's preload imported in a fresh interpreter with requests, urllib3 and
             the Docker SDK answered by empty stand-ins, against the real ones: Python objects
             (tracemalloc), modules, CPU of the imports (a run without tracemalloc)
  idle       which of the preloaded agent modules ran no function in any worker over a start and
             --idle-s of idle (sys.monitoring, one record per code object), and their own import time
  copies     each worker's copied pages by allocator (glibc's heap, pymalloc's arenas), and how many
             read the same as the supervisor's page

Each runs the idle production agent of footprint_bench.metered_agent (or, for stand-ins, no agent).

    python3 bench/footprint_census.py stand-ins|idle|copies [--runs 5] [--idle-s 70]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import footprint_bench, interpreters
from bench.footprint_account import import_costs
from bench.pages import ANONYMOUS, PAGE, page_table
from tests.support.agentproc import AgentProcess, wait_for

REPO = Path(__file__).resolve().parents[1]
STAND_IN_PACKAGES = ("requests", "urllib3", "docker")
SUPERVISOR_SIDE = ("faden_agent.supervisor", "faden_agent.cli", "faden_agent.__main__")
CHILD = REPO / "bench" / "census_child.py"  # what runs in the measured interpreter: nothing of the bench's

# ---------------------------------------------------------------- stand-ins


def stand_ins(python: str, runs: int) -> dict[str, Any]:
    """Each variant `runs` times, alternating; medians."""
    variants = {"real": (), "docker": ("docker",), "requests, urllib3, docker": STAND_IN_PACKAGES}
    out: dict[str, Any] = {}
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for _ in range(runs):
        for name, packages in variants.items():
            samples[name].append(child(python, packages, objects=False))
    for name, packages in variants.items():
        counted = child(python, packages, objects=True)
        out[name] = {
            "cpu_s_median": statistics.median(s["cpu_s"] for s in samples[name]),
            "cpu_s_all": [round(s["cpu_s"], 3) for s in samples[name]],
            "modules": counted["modules"],
            "objects_kib": counted["objects_kib"],
        }
    return out


def child(python: str, packages: tuple[str, ...], objects: bool) -> dict[str, Any]:
    argv = [python, str(CHILD), "preload", ",".join(packages), "objects" if objects else "cpu"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120, check=True)
    return json.loads(done.stdout.splitlines()[-1])


# ---------------------------------------------------------------- idle


def idle(root: Path, python: str, idle_s: float) -> dict[str, Any]:
    census = root / "census"
    census.mkdir()
    with footprint_bench.metered_agent(root) as rig:
        rig.agent.stop()
        env = dict(rig.env, CENSUS_DIR=str(census))
        agent = AgentProcess(env, root / "census.log", argv=[python, str(CHILD), "traced"]).start()
        try:
            time.sleep(idle_s)
            tree = {name: pid for name, pid in footprint_bench.named_tree(agent).items() if "(child of" not in name}
            for pid in tree.values():
                os.kill(pid, signal.SIGUSR2)
            wait_for(lambda: all((census / f"{pid}.json").exists() for pid in tree.values()), 15, 0.1, "dumps")
        finally:
            agent.stop()
            agent.kill()
    ran = {name: json.loads((census / f"{pid}.json").read_text()) for name, pid in tree.items()}
    loaded = [entry.rpartition(":")[0] for entry in ran["supervisor"] if entry.endswith(":<module>")]
    ours = [path for path in loaded if f"{os.sep}faden_agent{os.sep}" in path]
    in_workers = {
        entry.rpartition(":")[0]
        for name, entries in ran.items()
        if name != "supervisor"
        for entry in entries
        if not entry.endswith(":<module>")
    }
    # for the workers only: not the supervisor's own modules, nor the command line (importing
    # __main__ runs it)
    idle_modules = sorted(
        name for path in ours if path not in in_workers and not (name := module_name(path)).startswith(SUPERVISOR_SIDE)
    )
    every = import_costs(python, REPO, idle_modules, "cpu")  # also what they import first
    costs = {name: every.get(name, 0) for name in idle_modules}
    return {
        "idle_s": idle_s,
        "agent_modules": len(ours),
        "ran_nothing_in_a_worker": len(idle_modules),
        "their_import_ms": round(sum(costs.values()) / 1e6, 1),
        "by_package_ms": by_package(costs),
        "modules": idle_modules,
    }


def module_name(path: str) -> str:
    relative = Path(path).relative_to(REPO).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def by_package(costs: dict[str, int]) -> dict[str, float]:
    """{package (three levels of the name): ms}, largest first."""
    sums: collections.Counter[str] = collections.Counter()
    for module, ns in costs.items():
        sums[".".join(module.split(".")[:4])] += ns
    return {name: round(ns / 1e6, 2) for name, ns in sums.most_common(12)}


# ---------------------------------------------------------------- copies


def copies(root: Path, settle_s: float) -> dict[str, Any]:
    with footprint_bench.metered_agent(root) as rig:
        time.sleep(settle_s)
        tree = footprint_bench.named_tree(rig.agent)
        supervisor = tree["supervisor"]
        workers = {name: pid for name, pid in tree.items() if name != "supervisor" and "(child of" not in name}
        theirs = page_table(supervisor)
        tables = {name: page_table(pid) for name, pid in workers.items()}
        return {name: copied_pages(supervisor, pid, theirs, tables[name]) for name, pid in workers.items()}


def copied_pages(supervisor: int, worker: int, theirs: dict, mine: dict) -> dict[str, Any]:
    """KiB of the worker's pages copied since the fork, by allocator, and how many of those
    pages read the same as the supervisor's."""
    by_heap: collections.Counter[str] = collections.Counter()
    same = 0
    with open(f"/proc/{supervisor}/mem", "rb") as their_memory, open(f"/proc/{worker}/mem", "rb") as my_memory:
        for page, (frame, group) in mine.items():
            if group not in ANONYMOUS or page not in theirs or theirs[page][0] == frame:
                continue
            by_heap["glibc heap" if group == "[heap]" else "pymalloc arenas and other anonymous"] += PAGE // 1024
            their_memory.seek(page * PAGE)
            my_memory.seek(page * PAGE)
            try:
                same += their_memory.read(PAGE) == my_memory.read(PAGE)
            except OSError:  # unmapped since: not counted as the same
                pass
    return {**by_heap, "read the same, KiB": same * PAGE // 1024}


# ---------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("stand-ins", "idle", "copies"))
    parser.add_argument("--runs", type=int, default=5, help="stand-ins: alternating runs of each variant")
    parser.add_argument("--idle-s", type=float, default=70.0, help="idle: seconds after the start")
    parser.add_argument("--settle-s", type=float, default=30.0, help="copies: seconds after the start")
    args = parser.parse_args()
    python = sys.executable
    interpreters.compile_agent(python)  # imports from bytecode, as an installed agent does
    with tempfile.TemporaryDirectory(prefix="faden-census-") as tmp:
        if args.what == "stand-ins":
            result = stand_ins(python, args.runs)
        elif args.what == "idle":
            result = idle(Path(tmp), python, args.idle_s)
        else:
            result = copies(Path(tmp), args.settle_s)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
