"""The supervisor's HTTP endpoint: /metrics, /healthz, /readyz, served from its own loop.

Owns the HttpServer on METRICS_ADDR (or the reason it could not bind, shown by `ps`).
A request reads only the table the supervisor holds (fresh liveness messages drained,
never awaited); prometheus_client is imported at the first /metrics, in the supervisor only.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import zmq

from faden_agent.config import Config, env_name, listen_host_port
from faden_agent.metrics.health import readiness
from faden_agent.metrics.server import HttpServer

log = logging.getLogger(__name__)
OPENMETRICS = "application/openmetrics-text"
TEXT = "text/plain; charset=utf-8"
# The classic text format every Prometheus reads (our names need none of 1.0.0's escaping)
EXPOSITION_0_0_4 = "text/plain; version=0.0.4; charset=utf-8"
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


class MetricsEndpoint:
    def __init__(self, config: Config, table: Callable[[], dict[str, Any]], pids: Callable[[], dict[str, int]]):
        """table(): the supervisor's `ps` table, fresh; pids(): process name -> pid."""
        self.addr = config.metrics_addr
        self.table = table
        self.pids = pids
        self.server: HttpServer | None = None
        self.error: str | None = None

    def open(self, poller: zmq.Poller) -> None:
        if self.addr is None:
            return

        def watch(fd: int, readable: bool, writable: bool) -> None:
            flags = (zmq.POLLIN if readable else 0) | (zmq.POLLOUT if writable else 0)
            if flags:
                poller.register(fd, flags)
            else:
                poller.unregister(fd)

        host, port = listen_host_port(self.addr)
        try:
            self.server = HttpServer.bind(host, port, self.answer, watch)
        except OSError as exc:
            self.error = f"cannot listen on {self.addr} ({exc.strerror or exc}); set {env_name('metrics_addr')}"
            log.error("metrics endpoint: %s; the agent runs on without it", self.error)
            return
        log.info("metrics endpoint on http://%s/metrics", self.server.address)

    def status(self) -> dict[str, Any]:
        """What `ps` shows of the endpoint."""
        if self.addr is None:
            return {"addr": "off", "listening": False, "error": None}
        server = self.server
        return {
            "addr": server.address if server else self.addr,
            "listening": server is not None,
            "error": self.error,
            "dropped": server.dropped if server else 0,
        }

    def next_deadline(self) -> float | None:
        return self.server.next_deadline() if self.server else None

    def serve(self, ready: set[int]) -> None:
        if self.server is not None:
            self.server.serve(ready)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

    def forget_in_child(self) -> None:
        """In a forked worker: close the inherited sockets (the supervisor keeps serving)."""
        if self.server is not None:
            for conn in self.server.connections.values():
                conn.sock.close()
            self.server.sock.close()

    # ------------------------------------------------------------------ requests

    def answer(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, str, bytes]:
        if path == "/metrics":
            return self.metrics(headers.get("accept", ""))
        if path == "/healthz":
            return 200, TEXT, b"ok\n"
        if path == "/readyz":
            ready, why = readiness(self.table())
            return (200 if ready else 503), TEXT, why.encode("utf-8", "replace")[:500] + b"\n"
        return 404, TEXT, b"not found: try /metrics, /healthz or /readyz\n"

    def metrics(self, accept: str) -> tuple[int, str, bytes]:
        from faden_agent.metrics.families import families  # prometheus_client: at the first scrape

        table = self.table()
        registry = _Families(lambda: families(table, self.usage()))
        if OPENMETRICS in accept:
            from prometheus_client.openmetrics import exposition as openmetrics

            return 200, openmetrics.CONTENT_TYPE_LATEST, openmetrics.generate_latest(registry)
        from prometheus_client import exposition

        return 200, EXPOSITION_0_0_4, exposition.generate_latest(registry)

    def usage(self) -> dict[str, tuple[float, int, int | None]]:
        out = {}
        for name, pid in self.pids().items():
            figures = process_usage(pid)
            if figures is not None:
                out[name] = figures
        return out


class _Families:
    """The one collector generate_latest asks (a registry is a thing with collect())."""

    def __init__(self, collect: Callable[[], Any]):
        self.collect = collect


def process_usage(pid: int) -> tuple[float, int, int | None] | None:
    """(CPU seconds, RSS bytes, PSS bytes or None) from /proc; None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b") ", 1)[1].split()
        cpu_s = (int(fields[11]) + int(fields[12])) / TICKS
        rss = int(fields[21]) * PAGE_SIZE
    except (OSError, IndexError, ValueError):
        return None
    pss = None
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
            for line in rollup:
                if line.startswith(b"Pss:"):
                    pss = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError):
        pass
    return cpu_s, rss, pss
