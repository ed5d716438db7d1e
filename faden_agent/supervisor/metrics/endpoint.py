"""The supervisor's HTTP endpoint: /metrics, /healthz, /readyz, /sd/workloads (discovery.py).

Served from its own loop. Owns the HttpServer on METRICS_ADDR (or the reason it could not bind, shown by `ps`).
A request reads only the table the supervisor holds (fresh liveness messages drained,
never awaited) and /proc; scrapes within RENDER_EVERY_S get the last body (a rate bound).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import zmq

from faden_agent.config import Config, env_name, listen_host_port
from faden_agent.supervisor.metrics import discovery, exposition
from faden_agent.supervisor.metrics.families import sections
from faden_agent.supervisor.metrics.health import readiness
from faden_agent.supervisor.metrics.procstat import ProcessUsage
from faden_agent.supervisor.metrics.server import HttpServer

log = logging.getLogger(__name__)
OPENMETRICS = "application/openmetrics-text"
TEXT = "text/plain; charset=utf-8"
# A local process scraping in a loop (5,700/s) kept the supervisor at 64 % of a core: one
# body a second per format, whoever asks; Prometheus scrapes every 15 s or so.
RENDER_EVERY_S = 1.0


class MetricsEndpoint:
    def __init__(self, config: Config, table: Callable[[], dict[str, Any]], pids: Callable[[], dict[str, int]]):
        """table(): what a scrape reads of the supervisor's `ps` table, fresh; pids(): process name -> pid."""
        self.addr = config.metrics_addr
        self.machine = config.agent_id
        self.table = table
        self.pids = pids
        self.server: HttpServer | None = None
        self.error: str | None = None
        self.processes = ProcessUsage()
        self._reuse: dict[str, Any] = {}  # families.py: sections made from statuses seen before
        self._last: dict[bool, tuple[float, tuple[int, str, bytes]]] = {}  # openmetrics? -> (when, answer)

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
            **(server.figures() if server else {"dropped": 0}),
        }

    def next_deadline(self) -> float | None:
        return self.server.next_deadline() if self.server else None

    def serve(self, ready: set[int]) -> None:
        if self.server is not None:
            self.server.serve(ready)

    def close(self) -> None:
        self.processes.close()
        if self.server is not None:
            self.server.close()
            self.server = None

    def forget_in_child(self) -> None:
        """In a forked worker: close the inherited sockets and /proc files (the supervisor keeps them)."""
        self.processes.close()
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
        if path == discovery.PATH:
            return 200, discovery.JSON, discovery.document(self.table(), self.machine)
        return 404, TEXT, f"not found: try /metrics, /healthz, /readyz or {discovery.PATH}\n".encode()

    def metrics(self, accept: str) -> tuple[int, str, bytes]:
        openmetrics = OPENMETRICS in accept
        now = time.monotonic()
        last = self._last.get(openmetrics)
        if last is not None and now - last[0] < RENDER_EVERY_S:
            return last[1]
        produced = sections(self.table(), self.usage(), self._reuse)
        if openmetrics:
            answer = 200, exposition.OPENMETRICS_1_0, exposition.openmetrics_1_0(produced)
        else:
            answer = 200, exposition.TEXT_0_0_4, exposition.text_0_0_4(produced)
        self._last[openmetrics] = (now, answer)
        return answer

    def usage(self) -> dict[str, tuple[float, int, int | None]]:
        return self.processes.read(self.pids())
