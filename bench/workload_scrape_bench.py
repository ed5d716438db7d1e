"""CPU cost of the forward-progress scrapes (issue 43): 8 stand-in vLLM endpoints (a
separate process serving a vLLM-sized /metrics body, ~60 KiB of histograms), scraped the
way the inventory's thread does (one Docker list call, then each endpoint in turn); the
thread's CPU time per round over WORKLOAD_SCRAPE_SEC is the share of a core. Goal: < 0.5 %.
Run: python3 bench/workload_scrape_bench.py [--containers 8] [--rounds 40] [--json PATH]"""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.output import emit
from faden_agent.workers.inventory.workloads.watcher import FILTERS, WorkloadWatcher

SERVER = textwrap.dedent(
    """
    import http.server, socketserver, sys, threading
    lines = ['# TYPE vllm:num_requests_running gauge', 'vllm:num_requests_running{model_name="m"} 3',
             'vllm:num_requests_waiting{model_name="m"} 1', 'vllm:generation_tokens_total{model_name="m"} 123456']
    for family in range(12):
        for le in range(40):
            lines.append(f'vllm:histogram_{family}_bucket{{le="{le}.0",model_name="meta-llama/Llama-3-70B"}} {le * 7}')
    body = ("\\n".join(lines) + "\\n").encode()
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a): pass
    servers = [socketserver.ThreadingTCPServer(("127.0.0.1", 0), H) for _ in range(int(sys.argv[1]))]
    print(" ".join(str(s.server_address[1]) for s in servers), len(body), flush=True)
    for s in servers: threading.Thread(target=s.serve_forever, daemon=True).start()
    sys.stdin.read()
    """
)


def docker_lister():
    """A real Docker list call per round, as in the agent; none when no engine answers."""
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
    except Exception:  # noqa: BLE001 - no engine here: the scrapes alone
        return None
    return lambda: client.api.containers(filters=FILTERS)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--containers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--interval", type=float, default=15.0, help="WORKLOAD_SCRAPE_SEC the share is of")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(args.containers)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        *ports, body_bytes = server.stdout.readline().split()
        summaries = [
            {
                "Id": f"{i:064x}",
                "Names": [f"/vllm-{i}"],
                "Labels": {"io.fadenstack.metrics-port": port},
                "HostConfig": {"NetworkMode": "host"},
            }
            for i, port in enumerate(ports)
        ]
        lister = docker_lister()

        def list_containers():
            if lister is not None:
                lister()
            return summaries

        watcher = WorkloadWatcher(list_containers, lambda data, record_id: None, args.interval, 120.0)
        watcher.round()  # warm: imports, first connections
        cpu_s = []
        for _ in range(args.rounds):
            before = time.thread_time()
            watcher.round()
            cpu_s.append(time.thread_time() - before)
        assert all(s["scrape"] == "ok" for s in watcher.status()["containers"].values()), watcher.status()
        per_round = sorted(cpu_s)[len(cpu_s) // 2]
        emit(
            {
                "containers": args.containers,
                "body_bytes": int(body_bytes),
                "docker_list_included": lister is not None,
                "cpu_ms_per_round_median": round(per_round * 1000, 2),
                "cpu_ms_per_round_max": round(max(cpu_s) * 1000, 2),
                "interval_s": args.interval,
                "core_percent": round(per_round / args.interval * 100, 4),
                "goal_core_percent": 0.5,
            },
            args.json,
        )
    finally:
        server.stdin.close()
        server.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
