"""A multi-tenant Loki (real 2.8.0 and 3.4.6, `-auth.enabled=true`): with a tenant
(FADEN_NODE_AGENT_LOKI_TENANT, or named by the backend's log target) every line lands in
that tenant; without one Loki's 401 is a clear status, retried slowly, not a storm."""

from __future__ import annotations

import threading
import time

import pytest

from faden_agent.config import ConfigError, load_config
from faden_agent.workers.logs.entry import Entry
from faden_agent.workers.logs.loki.client import Pusher
from faden_agent.workers.logs.loki.destinations import DirectLoki
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import BackendProcess, agent_env_for
from tests.support.journalfiles import JournalWriter
from tests.support.lokiproc import VERSIONS, LokiProcess

DETAIL = {"unit": "gpu-burn.service", "pid": "7"}


@pytest.fixture(scope="module", params=VERSIONS, ids=[f"loki-{v}" for v in VERSIONS])
def tenant_loki(request, tmp_path_factory):
    with LokiProcess(request.param, tmp_path_factory.mktemp("auth") / "data", ["-auth.enabled=true"]) as loki:
        yield loki


def lines_of(loki: LokiProcess, tenant: str, selector: str) -> list[str]:
    loki.session.headers["X-Scope-OrgID"] = tenant
    try:
        return loki.lines(selector)
    finally:
        del loki.session.headers["X-Scope-OrgID"]


def batch(agent_id: str, n: int) -> list[Entry]:
    labels = (("agent_id", agent_id), ("job", "node-agent"))
    now = time.time_ns()
    return [Entry(labels, now + i, f"tenant line {i}", DETAIL, "journal", i) for i in range(n)]


def test_with_a_tenant_every_line_lands_in_that_tenant_and_no_other(tenant_loki, tmp_path):
    config = load_config({}, loki_url=tenant_loki.url, state_path=tmp_path / "state.json", loki_tenant="team-a")
    agent_id = f"tenant-{time.time_ns()}"
    lines = batch(agent_id, 40)
    pusher = Pusher(DirectLoki(config.loki_url, config), 0.05, 1.0, threading.Event().wait)
    assert pusher.push(lines[:20]).accepted == 20 and pusher.push(lines[20:]).accepted == 20  # JSON, then protobuf
    selector = f'{{agent_id="{agent_id}"}}'
    got = lines_of(tenant_loki, "team-a", selector)
    assert [line.split("\t")[0] for line in got] == [e.line for e in lines]
    assert lines_of(tenant_loki, "team-b", selector) == []


def test_without_a_tenant_the_401_is_a_clear_status_retried_slowly_and_nothing_is_dropped(tenant_loki, tmp_path):
    config = load_config({}, loki_url=tenant_loki.url, state_path=tmp_path / "state.json")
    target = DirectLoki(config.loki_url, config)
    answers = []
    send = target.send
    target.send = lambda *body: answers.append(send(*body)) or answers[-1]
    stop = threading.Event()
    # A fast backoff floor (50 ms) would make ~6 tries in 3 s for a 5xx; a 401 waits the ceiling.
    pusher = Pusher(target, 0.05, 2.0, stop.wait)
    threading.Timer(3.0, stop.set).start()
    assert pusher.push(batch("no-tenant", 5)) is None  # never counted done: read again later
    assert answers and {a.status for a in answers} == {401}
    assert len(answers) <= 3, answers
    assert "HTTP 401" in pusher.last_error and "FADEN_NODE_AGENT_LOKI_TENANT" in pusher.last_error


def test_the_backend_can_name_the_tenant_with_its_loki(tenant_loki, tmp_path):
    server = BackendProcess(
        tmp_path / "backend", tmp_path / "backend.log", loki_url=tenant_loki.url, loki_tenant="team-c"
    ).start()
    try:
        journal = JournalWriter(tmp_path / "journal")
        journal.append(journal.lines([f"named tenant {i}" for i in range(10)], priority=5))
        env = agent_env_for(server, tmp_path, journal_directory=journal.directory, log_flush_interval_sec=0.2)
        agent_id = env["FADEN_NODE_AGENT_AGENT_ID"]
        with AgentProcess(env, tmp_path / "agent.log"):
            selector = f'{{agent_id="{agent_id}", container="node-{agent_id}"}}'
            got = wait_for(lambda: len(x := lines_of(tenant_loki, "team-c", selector)) >= 10 and x, 60, what="lines")
        assert [line.split("\t")[0] for line in got] == [f"named tenant {i}" for i in range(10)]
    finally:
        server.stop()


@pytest.mark.parametrize("bad", ["a b", "x" * 151, "..", "t\r\nX-Evil: 1", "ümlaut"])
def test_a_tenant_loki_would_refuse_is_a_config_error_naming_the_variable(bad, tmp_path):
    with pytest.raises(ConfigError, match="FADEN_NODE_AGENT_LOKI_TENANT"):
        load_config({"FADEN_NODE_AGENT_LOKI_TENANT": bad, "FADEN_NODE_AGENT_STATE_PATH": str(tmp_path / "s.json")})
