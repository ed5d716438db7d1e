"""Stream figures (issue 3): heartbeat lateness (p50/p99 over N beats at a short interval),
reconnect time after a backend restart, and uplink throughput draining a 10,000-record
backlog. Real processes: the reference backend and `faden-agent run` on 127.0.0.1.

    python3 bench/stream_bench.py [--beats 100] [--interval 0.1] [--restarts 5] [--backlog 10000]
                                  [--json bench/results/stream.json]

Reconnect time runs from spawning the restarted backend (after a 1 s outage) to the first
new stream it serves, so it includes the backend's own start-up.
Lateness is the backend's receipt time minus the beat's due time on the agent's fixed grid
(same machine, same wall clock), so it includes the request's own latency.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from faden_agent import protocol
from faden_agent.backend.producer import Reports
from faden_agent.config import load_config
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import BackendProcess, agent_env_for


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def heartbeat_lateness(backend: BackendProcess, node_id: str, beats: int, interval: float) -> dict:
    start = time.time()
    wait_for(
        lambda: len([b for b in backend.heartbeats(node_id) if b["received_at"] > start]) >= beats,
        beats * interval * 3 + 30,
        interval_s=0.5,
        what=f"{beats} heartbeats",
    )
    recent = [b for b in backend.heartbeats(node_id) if b["received_at"] > start][:beats]
    return lateness_figures(recent, interval)


def lateness_figures(beats: list[dict], interval: float) -> dict:
    """p50/p99/max of (received at the backend - due on the agent's grid) over these beats,
    and how many beats of the grid between the first and the last never arrived."""
    lateness_ms = [(b["received_at"] - b["data"]["due_at"]) * 1000 for b in beats]
    skipped = beats[-1]["data"]["beat"] - beats[0]["data"]["beat"] + 1 - len(beats)
    return {
        "beats": len(beats),
        "interval_s": interval,
        "lateness_p50_ms": round(percentile(lateness_ms, 50), 2),
        "lateness_p99_ms": round(percentile(lateness_ms, 99), 2),
        "lateness_max_ms": round(max(lateness_ms), 2),
        "skipped_beats": skipped,
    }


def reconnect_times(backend: BackendProcess, restarts: int) -> dict:
    times = []
    for _ in range(restarts):
        backend.kill()
        time.sleep(1.0)  # an outage long enough that the agent sees it and backs off
        started_at = time.time()  # the backend process is spawned: its own start-up is included
        backend.start()
        first = wait_for(
            lambda started_at=started_at: [
                r
                for r in backend.admin.requests_log(started_at)
                if r["path"].endswith("/stream") and r["status"] == 200
            ],
            30,
            what="reconnect",
        )[0]
        times.append(first["at"] - started_at)
    return {
        "restarts": restarts,
        "reconnect_median_s": round(statistics.median(times), 3),
        "reconnect_max_s": round(max(times), 3),
        "all_s": [round(t, 3) for t in times],
    }


def drain_rate(backend: BackendProcess, env: dict, node_id: str, backlog: int) -> dict:
    backend.kill()
    producer = Reports(load_config(env))
    for i in range(backlog):
        producer.put(protocol.EVENT, {"type": "bench.event", "n": i, "pad": "x" * 100}, f"ev:bench:{i}")
    producer.close()
    started_at = time.time()
    backend.start()

    def bench_events() -> list[dict]:
        return [x for x in backend.admin.events(node_id, limit=10 * backlog) if x["id"].startswith("ev:bench:")]

    events = wait_for(lambda: len(e := bench_events()) >= backlog and e, 300, interval_s=1.0, what="backlog drained")
    first, last = min(e["received_at"] for e in events), max(e["received_at"] for e in events)
    return {
        "records": backlog,
        "drain_s": round(last - first, 3),
        "records_per_s": round(backlog / (last - first)),
        "from_backend_start_s": round(last - started_at, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beats", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--restarts", type=int, default=5)
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--reconnect-min", type=float, default=0.2)
    parser.add_argument("--reconnect-max", type=float, default=2.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="faden-stream-bench-") as tmp:
        root = Path(tmp)
        backend = BackendProcess(root / "data", root / "backend.log").start()
        env = agent_env_for(
            backend,
            root,
            heartbeat_interval_sec=args.interval,
            reconnect_min_sec=args.reconnect_min,
            reconnect_max_sec=args.reconnect_max,
        )
        agent = AgentProcess(env, root / "agent.log").start()
        try:
            node = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])
            results = {
                "heartbeat": heartbeat_lateness(backend, node["node_id"], args.beats, args.interval),
                "reconnect": {
                    **reconnect_times(backend, args.restarts),
                    "reconnect_min_s": args.reconnect_min,
                    "reconnect_max_s_setting": args.reconnect_max,
                },
                "uplink_drain": drain_rate(backend, env, node["node_id"], args.backlog),
            }
        finally:
            agent.stop()
            backend.stop()
    hb, rc, up = results["heartbeat"], results["reconnect"], results["uplink_drain"]
    print(
        f"heartbeat lateness over {hb['beats']} beats at {hb['interval_s']}s: p50 {hb['lateness_p50_ms']} ms, "
        f"p99 {hb['lateness_p99_ms']} ms, max {hb['lateness_max_ms']} ms, skipped {hb['skipped_beats']}"
    )
    print(
        "reconnect after backend restart, from spawning the backend (its ~0.3-0.5 s start-up included;"
        f" RECONNECT_MIN {args.reconnect_min}s, MAX {args.reconnect_max}s), "
        f"{rc['restarts']} restarts: median {rc['reconnect_median_s']} s, max {rc['reconnect_max_s']} s"
    )
    print(
        f"uplink drain of {up['records']} records: {up['records_per_s']} records/s "
        f"({up['drain_s']} s first to last; {up['from_backend_start_s']} s from backend start)"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
