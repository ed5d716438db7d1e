"""Executor latency and throughput, side by side in one run.

  1. queued at the reference backend -> container running (the container's own StartedAt,
     and the `succeeded` record visible at the backend), against starting the same
     container directly with the docker SDK; median of N each, and the ratio;
  2. 50 concurrent container.run commands queued at once -> all succeeded at the backend.

Everything is real: the reference backend process, an enrolled agent (all workers), the
local Docker engine. Run: python3 bench/executor_bench.py [--runs 20] [--concurrent 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import docker

from faden_agent import protocol
from tests.support.agentproc import AgentProcess
from tests.support.backendproc import BackendProcess, agent_env_for

IMAGE = "faden-test/busybox:1"
POLL_S = 0.005


def started_at(client: docker.DockerClient, name: str) -> float:
    """The container's StartedAt (nanosecond RFC 3339) as epoch seconds."""
    text = client.api.inspect_container(name)["State"]["StartedAt"]
    whole, _, frac = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(whole + "+00:00").timestamp() + float("0." + (frac or "0"))


def wait_succeeded(backend: BackendProcess, command_id: str, timeout_s: float = 60.0) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        command = backend.command(command_id)
        if command["state"] in protocol.TERMINAL_STATES:
            if command["state"] != protocol.SUCCEEDED:
                raise SystemExit(f"command {command_id} ended {command['state']}: {command['timeline'][-1]}")
            return time.time()
        time.sleep(POLL_S)
    raise SystemExit(f"command {command_id} did not finish in {timeout_s}s")


def remove(client: docker.DockerClient, prefix: str) -> None:
    for container in client.containers.list(all=True, filters={"name": prefix}):
        container.remove(force=True)


def round_trips(
    backend: BackendProcess, node: str, client: docker.DockerClient, prefix: str, runs: int
) -> tuple[list[float], list[float], list[float]]:
    """Seconds, per run: queued -> running and queued -> 'succeeded' at the backend via the
    agent, and SDK containers.run -> running, alternating; one warm-up of each not counted."""
    via_agent_running, via_agent_reported, direct = [], [], []
    for i in range(runs + 1):
        name = f"{prefix}-a{i}"
        t0 = time.time()
        command_id = backend.send_command(
            node, "container.run", {"name": name, "image": IMAGE, "command": ["sleep", "600"]}
        )
        reported = wait_succeeded(backend, command_id)
        if i:
            via_agent_running.append(started_at(client, name) - t0)
            via_agent_reported.append(reported - t0)
        name = f"{prefix}-d{i}"
        t0 = time.time()
        client.containers.run(IMAGE, ["sleep", "600"], name=name, detach=True)
        if i:
            direct.append(started_at(client, name) - t0)
        remove(client, prefix)
    return via_agent_running, via_agent_reported, direct


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--concurrent", type=int, default=50)
    args = parser.parse_args()

    client = docker.from_env(timeout=60)
    prefix = f"fxb-{uuid.uuid4().hex[:6]}"
    root = Path(tempfile.mkdtemp(prefix="executor-bench-"))
    backend = BackendProcess(root / "backend", root / "backend.log").start()
    env = agent_env_for(backend, root, docker_timeout_sec=30)
    agent = AgentProcess(env, root / "agent.log").start()
    try:
        node = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])["node_id"]
        via_agent_running, via_agent_reported, direct = round_trips(backend, node, client, prefix, args.runs)

        names = [f"{prefix}-c{i}" for i in range(args.concurrent)]
        t0 = time.time()
        ids = [
            backend.send_command(node, "container.run", {"name": n, "image": IMAGE, "command": ["sleep", "600"]})
            for n in names
        ]
        queued_s = time.time() - t0
        for command_id in ids:
            wait_succeeded(backend, command_id, timeout_s=300)
        all_done_s = time.time() - t0
        last_running_s = max(started_at(client, n) for n in names) - t0
        remove(client, prefix)

        # the same 50 straight through the SDK, 32 threads (the executor's pool size)
        t0 = time.time()
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(lambda n: client.containers.run(IMAGE, ["sleep", "600"], name=n + "d", detach=True), names))
        direct_all_s = max(started_at(client, n + "d") for n in names) - t0
        remove(client, prefix)
    finally:
        agent.stop()
        agent.kill()
        backend.stop()
        remove(client, prefix)

    med = statistics.median
    print(f"executor bench ({args.runs} runs each, medians; image {IMAGE}, docker {client.version()['Version']})")
    print(f"  queued at backend -> container running (StartedAt): {med(via_agent_running) * 1000:8.1f} ms")
    print(f"  queued at backend -> 'succeeded' seen at backend  : {med(via_agent_reported) * 1000:8.1f} ms")
    print(f"  docker SDK containers.run -> running (StartedAt)  : {med(direct) * 1000:8.1f} ms")
    print(f"  ratio agent/direct (to running)                   : {med(via_agent_running) / med(direct):8.2f}x")
    print(f"  ratio agent/direct (to reported)                  : {med(via_agent_reported) / med(direct):8.2f}x")
    print(f"{args.concurrent} concurrent container.run (queued in {queued_s:.2f} s):")
    print(f"  last container running after                      : {last_running_s:8.2f} s")
    print(f"  all 'succeeded' at the backend after              : {all_done_s:8.2f} s")
    print(f"  same {args.concurrent} via the docker SDK (32 threads) -> running: {direct_all_s:8.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
