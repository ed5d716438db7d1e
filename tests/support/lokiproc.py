"""A real Grafana Loki (2.8.0 or 3.4.6, the single binary) for tests, started on loopback
from the pinned builds (tests/support/testtools.py) with a minimal config of its own, and
read back through Loki's own query API.

    with LokiProcess("2.8.0", tmp_dir) as loki:      # .url -> http://127.0.0.1:PORT
        loki.lines('{agent_id="n1"}')                # every entry, oldest first
        loki.series('{agent_id="n1"}')               # label sets of the streams

Startup takes 10-30 s here: tests share one per version (a module or session fixture) and
keep apart by their own label values (agent_id). Stopped with SIGTERM. A missing build
skips the test (fails it under FADEN_TEST_REQUIRE_TOOLS=1).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import testtools
from tests.support.ports import free_port

VERSIONS = ("2.8.0", "3.4.6")
READY_TIMEOUT_S = 120.0
QUERY_LIMIT = 5000  # Loki's default max_entries_limit_per_query


def loki_config(version: str, port: int, data: Path, structured_metadata: bool = True) -> str:
    """Auth off, filesystem storage under `data`, an in-memory ring, loopback only (JSON,
    which Loki reads as YAML). 2.8.0: schema v11 on boltdb-shipper (it knows no structured
    metadata: a push whose values carry a third element is refused whole with 400); 3.4.6:
    schema v13 on TSDB, structured metadata allowed unless `structured_metadata` is False."""
    index = {"prefix": "index_", "period": "24h"}
    config: dict[str, Any] = {
        "auth_enabled": False,
        "server": {
            "http_listen_address": "127.0.0.1",
            "http_listen_port": port,
            "grpc_listen_address": "127.0.0.1",
            "grpc_listen_port": free_port(),
            "log_level": "warn",
        },
        "common": {
            "instance_addr": "127.0.0.1",
            "path_prefix": str(data),
            "storage": {"filesystem": {"chunks_directory": f"{data}/chunks", "rules_directory": f"{data}/rules"}},
            "replication_factor": 1,
            "ring": {"kvstore": {"store": "inmemory"}},
        },
        "analytics": {"reporting_enabled": False},
    }
    if version.startswith("2."):
        schema = {"from": "2020-10-24", "store": "boltdb-shipper", "schema": "v11"}
        config["storage_config"] = {
            "boltdb_shipper": {
                "active_index_directory": f"{data}/index",
                "cache_location": f"{data}/index-cache",
                "shared_store": "filesystem",
            },
            "filesystem": {"directory": f"{data}/chunks"},
        }
    else:
        schema = {"from": "2024-01-01", "store": "tsdb", "schema": "v13"}
        config["limits_config"] = {"allow_structured_metadata": structured_metadata}
    config["schema_config"] = {"configs": [{**schema, "object_store": "filesystem", "index": index}]}
    return json.dumps(config, indent=1)


class LokiProcess:
    def __init__(
        self,
        version: str,
        data_dir: Path,
        flags: list[str] | None = None,
        structured_metadata: bool = True,
        port: int | None = None,
    ):
        if version not in VERSIONS:
            raise ValueError(f"version must be one of {VERSIONS}")
        self.version = version
        self.data_dir = Path(data_dir)
        self.flags = list(flags or [])
        self.structured_metadata = structured_metadata
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.session = requests.Session()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> LokiProcess:
        binary = testtools.require(f"loki-{self.version}")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "loki.yaml"
        config.write_text(loki_config(self.version, self.port, self.data_dir, self.structured_metadata))
        argv = [str(binary), f"-config.file={config}", *self.flags]
        setpriv = shutil.which("setpriv")
        if setpriv:  # a test run that dies (killed, Ctrl-C) takes its Loki with it
            argv = [setpriv, "--pdeathsig", "TERM", "--", *argv]
        self._log = open(self.data_dir.parent / f"{self.data_dir.name}.log", "ab")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Loki {self.version} exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                if self.session.get(f"{self.url}/ready", timeout=2).text.strip() == "ready":
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"Loki {self.version} not ready within {timeout_s}s: {self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.proc is not None:
            self._log.close()
        self.proc = None

    def restart(self) -> LokiProcess:
        """The same Loki again on the same port and data (an outage and its end)."""
        self.stop()
        return self.start()

    def log_tail(self, chars: int = 2000) -> str:
        path = self.data_dir.parent / f"{self.data_dir.name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def __enter__(self) -> LokiProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ Loki's own API

    def _get(self, path: str, **params: Any) -> dict[str, Any]:
        reply = self.session.get(f"{self.url}{path}", params=params, timeout=180)
        if reply.status_code != 200:
            raise AssertionError(f"Loki {self.version} {path}: {reply.status_code} {reply.text[:300]}")
        return reply.json()

    def series(self, selector: str, since_s: float = 7200) -> list[dict[str, str]]:
        now = time.time_ns()
        return self._get(
            "/loki/api/v1/series", **{"match[]": selector, "start": now - int(since_s * 1e9), "end": now + 60 * 10**9}
        )["data"]

    def entries(self, selector: str, since_s: float = 7200) -> list[tuple[dict[str, str], int, str]]:
        """(labels, ts_ns, line) of every entry matching `selector`, oldest first, paging
        forward through query_range (Loki caps one answer at QUERY_LIMIT entries)."""
        start = time.time_ns() - int(since_s * 1e9)
        end = time.time_ns() + 60 * 10**9
        out: list[tuple[dict[str, str], int, str]] = []
        seen_at_start: set[tuple] = set()
        while True:
            data = self._get(
                "/loki/api/v1/query_range", query=selector, start=start, end=end, limit=QUERY_LIMIT, direction="forward"
            )["data"]["result"]
            page = sorted(
                ((r["stream"], int(ts), line) for r in data for ts, line, *_ in r["values"]), key=lambda e: e[1]
            )
            fresh = [e for e in page if (tuple(sorted(e[0].items())), e[1], e[2]) not in seen_at_start]
            out += fresh
            if len(page) < QUERY_LIMIT:
                return out
            start = page[-1][1]  # next page from the last stamp (inclusive: same-stamp lines)
            seen_at_start = {(tuple(sorted(e[0].items())), e[1], e[2]) for e in page if e[1] == start}

    def lines(self, selector: str, since_s: float = 7200) -> list[str]:
        return [line for _, _, line in self.entries(selector, since_s)]

    def metrics_value(self, name: str) -> float:
        """Sum of a Prometheus metric (all label sets) from Loki's /metrics."""
        text = self.session.get(f"{self.url}/metrics", timeout=30).text
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(name) and (line[len(name)] in " {")
        )


# ---------------------------------------------------------------------- pytest fixtures

# Loki's own limits, set low enough for tests to hit them for real (docs/logs.md):
# a line over MAX_LINE (above our own cut: only a line nobody cut), an entry older than
# MAX_AGE, a stream faster than RATE (429).
MAX_LINE = "96KB"
MAX_AGE = "30m"
RATE, BURST = "256KB", "512KB"
LIMIT_FLAGS = [
    f"-distributor.max-line-size={MAX_LINE}",
    "-validation.reject-old-samples=true",
    f"-validation.reject-old-samples.max-age={MAX_AGE}",
    f"-ingester.per-stream-rate-limit={RATE}",
    f"-ingester.per-stream-rate-limit-burst={BURST}",
]
# What a Loki adds of its own: 3.x derives a service_name label from the stream and a
# detected_level structured metadata field from the line.
LOKI_OWN_LABELS = {"2.8.0": set(), "3.4.6": {"service_name", "detected_level"}}


@pytest.fixture(scope="session", params=VERSIONS, ids=[f"loki-{v}" for v in VERSIONS])
def real_loki(request, tmp_path_factory):
    """One real Loki per version for the whole session, with LIMIT_FLAGS; tests keep apart
    by their own agent_id. Use it with `from tests.support.lokiproc import real_loki  # noqa: F401`."""
    loki = LokiProcess(request.param, tmp_path_factory.mktemp(f"loki-{request.param}") / "data", LIMIT_FLAGS)
    loki.start()
    yield loki
    loki.stop()


@pytest.fixture(scope="session")
def loki_3(tmp_path_factory):
    """One real Loki 3.4.6 for the whole session (Loki's own limits): tests that need one
    Loki, not both versions, keep apart by their agent_id. Use it with
    `from tests.support.lokiproc import loki_3  # noqa: F401`."""
    loki = LokiProcess("3.4.6", tmp_path_factory.mktemp("loki-3") / "data")
    loki.start()
    yield loki
    loki.stop()


def count(loki: LokiProcess, selector: str, since: str = "2h") -> int:
    """How many entries Loki holds for `selector` (one cheap metric query, not a read)."""
    result = loki._get("/loki/api/v1/query", query=f"sum(count_over_time({selector}[{since}]))", time=time.time_ns())[
        "data"
    ]["result"]
    return int(float(result[0]["value"][1])) if result else 0
