"""Supervisor figures (issue 2): restart latency after kill -9, hung-worker detection time,
PSS of the idle tree, and the fork vs fork+exec comparison that chose the process model.

    python bench/supervisor_bench.py [--kills 20] [--json bench/results/supervisor.json]

Runs the real `faden-agent run` (its real workers) in a temporary directory.
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.agentproc import AgentProcess, agent_env, wait_for


def pss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        for line in fh:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def tree_pss_kib(agent: AgentProcess) -> tuple[int, dict[str, int]]:
    parts = {"supervisor": pss_kib(agent.pid)}
    for name, row in agent.workers().items():
        parts[name] = pss_kib(row["pid"])
    return sum(parts.values()), parts


def production_restart_env(tmp_path: Path) -> dict[str, str]:
    """Production backoff (0.2 s first delay); a 1 s window so every kill spaced 1.2 s apart
    counts as a first failure."""
    env = agent_env(
        tmp_path,
        RESTART_WINDOW_SEC="1",
        RESTART_MAX="1000",
        WORKER_LIVENESS_SEC="1",
        WORKER_HANG_TIMEOUT_SEC="10",
        RESTART_BACKOFF_MIN_SEC="0.2",
    )
    env.pop("FADEN_NODE_AGENT_RESTART_BACKOFF_MAX_SEC")
    return env


def raw_fork_env(tmp_path: Path) -> dict[str, str]:
    """(Almost) no backoff: a restart is the bare fork to the worker's first heartbeat."""
    return agent_env(
        tmp_path,
        RESTART_WINDOW_SEC="1",
        RESTART_MAX="1000",
        WORKER_LIVENESS_SEC="1",
        RESTART_BACKOFF_MIN_SEC="0.001",
        RESTART_BACKOFF_MAX_SEC="0.001",
    )


def restart_latencies(agent: AgentProcess, name: str, kills: int, spacing_s: float) -> list[float]:
    out = []
    for _ in range(kills):
        old = agent.wait_all_running()[name]["pid"]
        time.sleep(spacing_s)  # let the previous exit leave the restart window
        killed = time.monotonic()
        os.kill(old, signal.SIGKILL)
        wait_for(
            lambda old=old: (w := agent.workers().get(name)) and w["state"] == "RUNNING" and w["pid"] != old,
            timeout_s=30,
            interval_s=0.002,
            what="restart",
        )
        out.append(time.monotonic() - killed)
    return out


def hang_detection(agent: AgentProcess, name: str) -> tuple[float, float]:
    old = agent.wait_all_running()[name]["pid"]
    stopped = time.monotonic()
    os.kill(old, signal.SIGSTOP)
    wait_for(lambda: (w := agent.workers().get(name)) and w["pid"] != old, timeout_s=60, interval_s=0.005, what="kill")
    detected = time.monotonic() - stopped
    wait_for(
        lambda: (w := agent.workers().get(name)) and w["state"] == "RUNNING",
        timeout_s=60,
        interval_s=0.005,
        what="restart",
    )
    return detected, time.monotonic() - stopped


def exec_start_cost(runs: int = 10) -> float:
    """What fork+exec would add per start: a fresh interpreter importing a worker's basics."""
    code = "import faden_agent.workers.base, faden_agent.config, zmq"
    times = []
    for _ in range(runs):
        started = time.monotonic()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.monotonic() - started)
    return statistics.median(times)


def exec_idle_pss_kib() -> int:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import faden_agent.workers.base, faden_agent.config, zmq, time; time.sleep(30)"]
    )
    time.sleep(2)
    value = pss_kib(proc.pid)
    proc.kill()
    proc.wait()
    return value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--json", default="bench/results/supervisor.json")
    args = parser.parse_args()
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        with AgentProcess(production_restart_env(tmp_path), tmp_path / "agent.log") as agent:
            time.sleep(5)
            total, parts = tree_pss_kib(agent)
            results["idle_tree_pss_kib"] = total
            results["idle_pss_by_process_kib"] = parts
            lat = restart_latencies(agent, "inventory", args.kills, spacing_s=1.2)
            results["restart_latency_s"] = {
                "median": statistics.median(lat),
                "max": max(lat),
                "n": len(lat),
                "backoff_min_s": 0.2,
            }
            detected, replaced = hang_detection(agent, "logs")
            results["hung_detection_s"] = {
                "hang_timeout_s": 10,
                "killed_after_s": detected,
                "running_again_after_s": replaced,
            }
        # The process model: raw fork-to-first-heartbeat with (almost) no backoff, vs exec cost.
        (tmp_path / "b").mkdir()
        with AgentProcess(raw_fork_env(tmp_path / "b"), tmp_path / "b" / "agent.log") as agent:
            raw = restart_latencies(agent, "inventory", 10, spacing_s=1.2)
            results["fork_to_running_s"] = {"median": statistics.median(raw), "max": max(raw)}
            time.sleep(2)
            results["forked_worker_pss_kib"] = pss_kib(agent.workers()["inventory"]["pid"])
        results["exec_interpreter_start_s"] = exec_start_cost()
        results["exec_worker_idle_pss_kib"] = exec_idle_pss_kib()
    print(f"{'figure':<44} value")
    rl = results["restart_latency_s"]
    print(
        f"{'restart latency after kill -9 (median/max)':<44} {rl['median'] * 1000:.0f} ms / "
        f"{rl['max'] * 1000:.0f} ms over {rl['n']} kills (first backoff 200 ms +-20 %)"
    )
    hd = results["hung_detection_s"]
    print(
        f"{'hung worker (SIGSTOP) killed / running again':<44} {hd['killed_after_s']:.2f} s / "
        f"{hd['running_again_after_s']:.2f} s (hang timeout 10 s)"
    )
    print(f"{'idle tree PSS (supervisor + workers)':<44} {results['idle_tree_pss_kib'] / 1024:.1f} MiB {parts}")
    fr = results["fork_to_running_s"]
    print(f"{'fork -> first heartbeat (median/max)':<44} {fr['median'] * 1000:.1f} ms / {fr['max'] * 1000:.1f} ms")
    print(
        f"{'fork+exec: interpreter + imports alone':<44} {results['exec_interpreter_start_s'] * 1000:.1f} ms "
        f"(ratio {results['exec_interpreter_start_s'] / fr['median']:.1f}x)"
    )
    print(
        f"{'PSS of one idle worker: forked vs exec':<44} {results['forked_worker_pss_kib'] / 1024:.1f} MiB vs "
        f"{results['exec_worker_idle_pss_kib'] / 1024:.1f} MiB"
    )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
