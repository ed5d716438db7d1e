"""What one traffic sample costs on a host with many TCP sockets (issue 15).

    python3 bench/traffic_sampling.py [SOCKETS ...]      (default: 1000 20000; root for > 1024 fds)

Opens SOCKETS/2 loopback connections to 127.0.0.1 (the host's other traffic) plus 3 peers
(127.0.0.2-4) with 8 connections each, then measures the CPU (user + system, of this
process: the kernel's work for our netlink requests included) per sample of:
  peers (kernel filter)  TcpAccounting.sample: the dump the agent makes, filtered by peer address in the kernel
  all sockets (parsed)   sockdiag.dump() of every socket, parsed in Python: the cost without the filter
  full sample            TrafficReporter.sample(): peers + NICs + RDMA ports + peers file
"""

from __future__ import annotations

import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from faden_agent.node.cluster import write_peers
from faden_agent.workers.inventory.traffic import sockdiag
from faden_agent.workers.inventory.traffic.report import TrafficReporter
from faden_agent.workers.inventory.traffic.tcp import TcpAccounting

PEERS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
ROUNDS = 20


def connections(address: str, count: int) -> list[socket.socket]:
    listener = socket.create_server((address, 0), backlog=4096)
    out = [listener]
    for _ in range(count):
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
        out += [client, server]
    return out


def cpu_ms_per_call(call) -> float:
    call()  # warm
    start = time.process_time()
    for _ in range(ROUNDS):
        call()
    return (time.process_time() - start) / ROUNDS * 1000


def hold_in_children(total_sockets: int) -> list[subprocess.Popen]:
    """Children hold the sockets (this host allows 20,000 files per process)."""
    children = []
    left = total_sockets // 2
    while left > 0:
        count = min(left, 4000)
        child = subprocess.Popen(
            [sys.executable, __file__, "--hold", str(count)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert child.stdout.readline().strip() == b"ready"
        children.append(child)
        left -= count
    return children


def measure(total_sockets: int) -> None:
    children = hold_in_children(total_sockets)
    held = []
    for peer in PEERS:
        held += connections(peer, 8)
    count = len(sockdiag.dump())
    state = Path(tempfile.mkdtemp())
    write_peers(state, {"cluster": "bench", "peers": [{"node_id": p, "address": p} for p in PEERS]})
    reporter = TrafficReporter(state, Path("/sys"), lambda *a: None, lambda *a: None)
    accounting = TcpAccounting(sockdiag.dump)
    results = {
        "peers (kernel filter)": cpu_ms_per_call(lambda: accounting.sample(PEERS)),
        "all sockets (parsed)": cpu_ms_per_call(sockdiag.dump),
        "full sample": cpu_ms_per_call(reporter.sample),
    }
    print(f"{count:>6} TCP sockets on the host: " + ", ".join(f"{k} {v:.2f} ms CPU" for k, v in results.items()))
    for sock in held:
        sock.close()
    for child in children:
        child.stdin.close()
        child.wait(60)


def main(argv: list[str]) -> None:
    if argv[:1] == ["--hold"]:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        held = connections("127.0.0.1", int(argv[1]))
        print("ready", flush=True)
        sys.stdin.read()  # the connections stay open until the parent closes stdin
        for sock in held:
            sock.close()
        return
    sizes = [int(a) for a in argv] or [1000, 20000]
    for size in sizes:
        measure(size)
        time.sleep(1)  # let the closed ones go


if __name__ == "__main__":
    main(sys.argv[1:])
