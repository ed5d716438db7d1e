"""What the agent's start costs: CPU seconds of the whole tree from exec until the supervisor
has seen every worker RUNNING (its "ready" line), median of N starts of the same enrolled
agent, and where the supervisor's part goes.

CPU is read from a cpuacct cgroup of the bench's own (nanoseconds, every thread and process
of the tree, also those that ended), else summed from /proc/PID/stat (10 ms ticks), and per
process from /proc/PID/stat. CPU seconds, not wall time: on a shared machine other work moves
wall time. The agent imports from bytecode as an installed agent does (compileall first:
PYTHONDONTWRITEBYTECODE would otherwise make every start compile its sources).

    python3 bench/start_bench.py [--starts 5] [--python 3.11] [--settle 10] [--against COMMIT] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import footprint_bench, interpreters, output
from bench.cputime import cpu_group, group_cpu_s, in_group, process_cpu_s
from tests.support.agentproc import AgentProcess, wait_for

REPO = Path(__file__).resolve().parents[1]
READY = re.compile(r"\[\d+\] INFO faden_agent\.supervisor\.arbiter: ready: ")
PREFORK = re.compile(r"prepared to fork in ([\d.]+) CPU s: (.*)$", re.M)


def tree_cpu(agent: AgentProcess, group: Path | None) -> dict[str, Any]:
    per = {}
    for name, pid in footprint_bench.named_tree(agent).items():
        with contextlib.suppress(OSError):
            per[name] = round(process_cpu_s(pid), 3)
    total = group_cpu_s(group) if group is not None else sum(per.values())
    return {"tree_cpu_s": round(total, 4), "per_process_cpu_s": per, "precise": group is not None}


def one_start(env: dict[str, str], log: Path, argv: list[str], settle_s: float) -> dict[str, Any]:
    """Starts the agent, reads the tree's CPU when the supervisor says it is ready (every
    worker RUNNING) and again `settle_s` later, stops it."""
    with cpu_group() as group:
        offset = log.stat().st_size if log.exists() else 0
        agent = AgentProcess(env, log, argv=in_group(group, argv)).start(wait_running=False)
        started = time.monotonic()
        try:
            wait_for(lambda: READY.search(log.read_text(errors="replace")[offset:]), 60, 0.005, "the ready line")
            ready = {"wall_s": round(time.monotonic() - started, 3), **tree_cpu(agent, group)}
            time.sleep(settle_s)
            settled = tree_cpu(agent, group)
        finally:
            agent.stop()
            agent.kill()
        text = log.read_text(errors="replace")[offset:]
        prefork = PREFORK.search(text)
        return {
            "ready": ready,
            f"after_{settle_s:g}_s": settled,
            "prefork": {"cpu_s": float(prefork.group(1)), "steps": prefork.group(2)} if prefork else None,
        }


def probed_start(env: dict[str, str], root: Path, python: str) -> dict[str, Any]:
    """One more start through bench/agent_probe.py: per process, the CPU of its own imports
    by module group (a worker's from its fork on), and the supervisor's CPU at its first fork."""
    from bench.footprint_account import PROBE, feature_of, probe_dumps

    dumps = root / "probe"
    dumps.mkdir()
    log = root / "start-probed.log"
    agent = AgentProcess(env, log, argv=[python, str(PROBE), "run", str(dumps), str(REPO)]).start(wait_running=False)
    try:
        wait_for(lambda: READY.search(log.read_text(errors="replace")), 60, 0.005, "the ready line")
        probes = probe_dumps(footprint_bench.named_tree(agent), dumps)
    finally:
        agent.stop()
        agent.kill()
    out = {}
    for name, probe in probes.items():
        groups: dict[str, float] = {}
        for module, ns in probe["import_self_ns"].items():
            groups[feature_of(module)] = groups.get(feature_of(module), 0.0) + ns / 1e6
        out[name] = {
            "cpu_s": round(probe["cpu_s"], 3),
            "imports_ms": round(sum(groups.values()), 1),
            "import_groups_ms": {k: round(v, 1) for k, v in sorted(groups.items(), key=lambda kv: -kv[1]) if v >= 0.5},
            "at_first_fork": probe["first_fork"],
        }
    return out


def measure(root: Path, python: str, starts: int, settle_s: float, against: str | None = None) -> dict[str, Any]:
    """`starts` starts of the same enrolled agent; with `against` (a commit), as many of that
    tree's agent, alternating with them (same backend, state and moment)."""
    from bench.footprint_account import export_tree, run_from

    interpreters.compile_agent(python)
    argv = [python, "-m", "faden_agent", "run"]
    other = None
    if against:
        source = export_tree(against, root / "against-source")
        interpreters.compile_agent(python, source)
        other = [*run_from(python, source), "run"]
    with footprint_bench.metered_agent(root, agent_argv=argv) as rig:  # enrolls once; the starts reuse its state
        env = rig.env
        rig.agent.stop()
        runs, theirs = [], []
        for i in range(starts):
            runs.append(one_start(env, root / f"start-{i}.log", argv, settle_s))
            if other:
                theirs.append(one_start(env, root / f"start-against-{i}.log", other, settle_s))
        probed = probed_start(env, root, python)
    ready = [r["ready"]["tree_cpu_s"] for r in runs]
    compared = {}
    if theirs:
        compared = {
            "against": {
                "commit": against,
                "tree_cpu_s_median": statistics.median(r["ready"]["tree_cpu_s"] for r in theirs),
                "tree_cpu_s_all": [r["ready"]["tree_cpu_s"] for r in theirs],
                "supervisor_cpu_s_median": statistics.median(
                    r["ready"]["per_process_cpu_s"]["supervisor"] for r in theirs
                ),
            }
        }
    return {
        **compared,
        "python": interpreters.version_of(python),
        "load_average": os.getloadavg(),
        "starts": runs,
        "tree_cpu_s_median": statistics.median(ready),
        "tree_cpu_s_all": ready,
        "supervisor_cpu_s_median": statistics.median(r["ready"]["per_process_cpu_s"]["supervisor"] for r in runs),
        "settled_cpu_s_median": statistics.median(r[f"after_{settle_s:g}_s"]["tree_cpu_s"] for r in runs),
        "imports_by_process": probed,
    }


def report(results: dict[str, Any], row) -> None:
    ready = results["tree_cpu_s_all"]
    row(
        f"start: tree CPU to every worker RUNNING (CPython {results['python']})",
        f"{results['tree_cpu_s_median']:.3f} CPU s (median of {len(ready)})",
        f"runs {', '.join(f'{r:.3f}' for r in ready)}; supervisor "
        f"{results['supervisor_cpu_s_median']:.3f} s; goal <= 0.25 s",
    )
    if "against" in results:
        other = results["against"]
        row(
            f"  the same, {other['commit']} (alternating)",
            f"{other['tree_cpu_s_median']:.3f} CPU s",
            f"runs {', '.join(f'{r:.3f}' for r in other['tree_cpu_s_all'])}; supervisor "
            f"{other['supervisor_cpu_s_median']:.3f} s",
        )
    first = results["starts"][len(results["starts"]) // 2]
    row(
        "  per process at ready (10 ms ticks)",
        "",
        ", ".join(f"{k} {v:.2f}" for k, v in first["ready"]["per_process_cpu_s"].items()),
    )
    if first.get("prefork"):
        row("  supervisor before its first fork", f"{first['prefork']['cpu_s']:.3f} CPU s", first["prefork"]["steps"])
    for name, probe in results.get("imports_by_process", {}).items():
        fork = probe["at_first_fork"]
        before = f"; {fork['cpu_s']:.3f} CPU s at its first fork" if "cpu_s" in fork else ""
        row(
            f"  imports of {name} (probed start)",
            f"{probe['imports_ms']:.0f} ms CPU",
            ", ".join(f"{k} {v:.1f}" for k, v in list(probe["import_groups_ms"].items())[:10]) + before,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--settle", type=float, default=10.0, help="also the tree's CPU this long after ready")
    parser.add_argument("--python", help="the CPython version to run the agent on (e.g. 3.11)")
    parser.add_argument("--against", metavar="COMMIT", help="also that tree's starts, alternating with these")
    parser.add_argument("--json", type=Path, default=Path("bench/results/start.json"))
    args = parser.parse_args()
    python = interpreters.with_agent(interpreters.cpythons()[args.python]) if args.python else sys.executable
    with tempfile.TemporaryDirectory(prefix="faden-start-") as tmp:
        results = measure(Path(tmp), python, args.starts, args.settle, args.against)
    output.table_and_json(results, report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
