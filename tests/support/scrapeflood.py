"""Local clients scraping an HTTP endpoint flat out, each its own process (a loop of connect,
GET, read to the end, close; no pause), and a process's CPU time read from /proc.

    with ScrapeFlood(host, port, clients=8) as flood:
        ...                      # flood.answers() so far, summed over the clients
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

CLIENT = r"""
import socket, sys, time
host, port, count_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
answers = 0
last_write = 0.0
request = f"GET /metrics HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
while True:
    try:
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(request)
            while sock.recv(65536):
                pass
        answers += 1
    except OSError:
        time.sleep(0.01)
    if time.monotonic() - last_write > 0.2:
        with open(count_path, "w") as fh:
            fh.write(str(answers))
        last_write = time.monotonic()
"""


class ScrapeFlood:
    def __init__(self, host: str, port: int, clients: int = 8):
        self.dir = Path(tempfile.mkdtemp(prefix="scrapeflood-"))
        self.procs = [
            subprocess.Popen([sys.executable, "-c", CLIENT, host, str(port), str(self.dir / f"{n}.count")])
            for n in range(clients)
        ]

    def answers(self) -> int:
        total = 0
        for path in self.dir.glob("*.count"):
            try:
                total += int(path.read_text() or 0)
            except (OSError, ValueError):
                pass
        return total

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait(10)

    def __enter__(self) -> ScrapeFlood:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
