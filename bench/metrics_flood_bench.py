"""The supervisor's CPU under a scrape flood: N local clients scraping /metrics flat out
(tests/support/scrapeflood.py), against the same agent unscraped; a worker SIGKILLed in the
middle of the flood and the time until it runs again.

One agent (test intervals) enrolled to the reference backend; windows of --window seconds:
unscraped, then flooded. Per window: the supervisor's CPU (/proc, % of one core), the
answers a second the clients got, and the endpoint's own figures (answered, held back).
Run: python3 bench/metrics_flood_bench.py [--clients 8] [--window 20] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.output import emit
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import BackendProcess, agent_env_for
from tests.support.metricsclient import endpoint, get
from tests.support.scrapeflood import ScrapeFlood, cpu_seconds


def window(agent: AgentProcess, seconds: float, flood: ScrapeFlood | None) -> dict[str, float]:
    cpu, wall, answers = cpu_seconds(agent.pid), time.monotonic(), flood.answers() if flood else 0
    time.sleep(seconds)
    took = time.monotonic() - wall
    out = {"supervisor_cpu_pct": round(100 * (cpu_seconds(agent.pid) - cpu) / took, 1)}
    if flood:
        out["answers_per_s"] = round((flood.answers() - answers) / took, 1)
    return out


def restart_time(agent: AgentProcess, name: str = "inventory") -> float:
    victim = agent.workers()[name]["pid"]
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()

    def running() -> bool:
        table = agent.ps(timeout_s=5.0) or {"workers": []}
        row = next((w for w in table["workers"] if w["name"] == name), {})
        return row.get("pid") not in (None, victim) and row.get("state") == "RUNNING"

    wait_for(running, 30, interval_s=0.05, what="the worker back")
    return round(time.monotonic() - killed, 2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        backend = BackendProcess(root / "backend", root / "backend.log").start()
        env = agent_env_for(backend, root / "agent", restart_backoff_min_sec="0.5", restart_backoff_max_sec="1")
        agent = AgentProcess(env, root / "agent.log").start()
        try:
            backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])
            time.sleep(3)
            figures: dict[str, object] = {"clients": args.clients, "window_s": args.window}
            figures["unscraped"] = window(agent, args.window, None)
            figures["restart_unscraped_s"] = restart_time(agent)
            host, port = endpoint(agent)
            with ScrapeFlood(host, port, args.clients) as flood:
                time.sleep(2)
                figures["flooded"] = window(agent, args.window, flood)
                figures["restart_flooded_s"] = restart_time(agent)
            scrape = get(agent)
            figures["endpoint"] = {
                name: scrape.value(f"faden_agent_metrics_{name}")
                for name in ("answers_total", "held_seconds_total", "connections_dropped_total", "answer_budget")
            }
            figures["cpus"] = os.cpu_count()
            figures["load_average"] = os.getloadavg()[0]
        finally:
            agent.stop()
            agent.kill()
            backend.stop()
    emit(figures, args.json)


if __name__ == "__main__":
    main()
