"""Test helpers: scrape a real agent's metrics endpoint and parse it with Prometheus' own
text parser (never string matching)."""

from __future__ import annotations

import http.client
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.support.agentproc import AgentProcess, wait_for


@dataclass
class Scrape:
    status: int
    content_type: str
    body: bytes
    seconds: float

    def families(self) -> dict[str, Any]:
        return {f.name: f for f in text_string_to_metric_families(self.body.decode())}

    def value(self, name: str, **labels: str) -> float | None:
        """The one sample named `name` whose labels include `labels`; None when absent."""
        for family in text_string_to_metric_families(self.body.decode()):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return sample.value
        return None


def endpoint(agent: AgentProcess) -> tuple[str, int]:
    metrics = wait_for(lambda: (agent.ps() or {}).get("supervisor", {}).get("metrics"), 10, what="metrics in ps")
    host, _, port = metrics["addr"].rpartition(":")
    return host.strip("[]"), int(port)


def get(agent: AgentProcess, path: str = "/metrics", accept: str | None = None, timeout_s: float = 10) -> Scrape:
    host, port = endpoint(agent)
    started = time.monotonic()
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", path, headers={"Accept": accept} if accept else {})
        reply = conn.getresponse()
        body = reply.read()
    finally:
        conn.close()
    return Scrape(reply.status, reply.getheader("Content-Type", ""), body, time.monotonic() - started)


def value_of(agent: AgentProcess, name: str, **labels: str) -> float | None:
    return get(agent).value(name, **labels)


def promtool_check(body: bytes) -> str:
    """`promtool check metrics` (Debian's prometheus package, tests/infra/start-services.sh)
    over a scrape: its findings, "" when it passes."""
    from tests.conftest import require

    promtool = shutil.which("promtool")
    if promtool is None:
        require("promtool", "it is not installed (tests/infra/start-services.sh installs it)")
    done = subprocess.run([str(promtool), "check", "metrics"], input=body, capture_output=True, timeout=30)
    return "" if done.returncode == 0 else (done.stdout + done.stderr).decode()
