"""A tiny serving engine for tests, run by the Python test image's python3 (3.11, standard
library only): vLLM's metric names on :8000/metrics, one request running and two waiting, its
generation token counter moving every step, until the file /control/stall exists: then its
engine loop spins inside wait_for_collective() (a collective that never completes), frozen."""

from __future__ import annotations

import http.server
import os
import sys
import threading
import time

TOKENS = [0]


def metrics() -> bytes:
    return (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="m"} 1\n'
        'vllm:num_requests_waiting{model_name="m"} 2\n'
        "# TYPE vllm:generation_tokens_total counter\n"
        f'vllm:generation_tokens_total{{model_name="m"}} {TOKENS[0]}\n'
    ).encode()


class Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the standard library's name
        body = metrics()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def wait_for_collective() -> None:
    """An all-reduce whose peers never arrive: the engine spins here for ever."""
    spins = 0
    while True:
        spins += 1


def engine_step() -> None:
    if os.path.exists("/control/stall"):
        print("engine: entering the all-reduce of step", TOKENS[0] // 10, flush=True)
        wait_for_collective()
    TOKENS[0] += 10
    if TOKENS[0] % 100 == 0:
        print("engine: generated", TOKENS[0], "tokens", flush=True)


def main() -> int:
    server = http.server.ThreadingHTTPServer(("0.0.0.0", 8000), Metrics)
    threading.Thread(target=server.serve_forever, name="metrics-server", daemon=True).start()
    print("engine: serving metrics on :8000", flush=True)
    while True:
        engine_step()
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
