"""Forward progress of serving containers in a real inventory worker under its supervisor:
stand-in serving containers (busybox httpd serving a metrics file the test rewrites) ->
advancing counters no event, waiting requests and a frozen counter workload.stalled within
the limit plus one scrape, moving again workload.recovered, idle no event; endpoints that
hang, answer 1 GB or garbage end as reasons while the worker keeps scraping."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from faden_agent import protocol
from tests.conftest import TEST_IMAGE
from tests.support.agentproc import agent_env, wait_for
from tests.support.metricsclient import get, promtool_check
from tests.support.outboxevents import outbox_events
from tests.support.sampleworkers import supervisor_argv

pytestmark = pytest.mark.docker

INVENTORY_ONLY = supervisor_argv({"inventory": "faden_agent.workers.inventory.worker:InventoryWorker"})
SCRAPE_S = 1
STALL_S = 3
HTTPD = ["busybox", "httpd", "-f", "-p", "8000", "-h", "/www"]


def workload_events(state_dir, names):
    """Of these containers only: tests beside this one run containers on the same engine."""
    return [row["data"] for row in outbox_events(state_dir, "workload.") if row["data"]["name"] in names]


def write_metrics(www, running, waiting, tokens):
    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{model_name="m"}} {running}\n'
        f'vllm:num_requests_waiting{{model_name="m"}} {waiting}\n'
        "# TYPE vllm:generation_tokens_total counter\n"
        f'vllm:generation_tokens_total{{model_name="m"}} {tokens}\n'
    )
    (www / "metrics.tmp").write_text(text)
    os.replace(www / "metrics.tmp", www / "metrics")  # httpd opens the file per request


@pytest.fixture
def serving(docker_client, tmp_path):
    """start(command, www) -> a managed container labelled with metrics port 8000."""
    started = []

    def start(command, www, path=None):
        name = f"faden-i43-{uuid.uuid4().hex[:8]}"
        volumes = {str(www): {"bind": "/www", "mode": "ro"}}
        labels = {protocol.LABEL_MANAGED: "true", protocol.LABEL_METRICS_PORT: "8000", protocol.LABEL_CLUSTER: "c1"}
        if path:
            labels[protocol.LABEL_METRICS_PATH] = path
        container = docker_client.containers.run(
            TEST_IMAGE, command, name=name, labels=labels, volumes=volumes, detach=True
        )
        started.append(container)
        return name

    yield start
    for container in started:
        container.remove(force=True)


def workloads(agent):
    status = (agent.workers().get("inventory") or {}).get("status") or {}
    return status.get("workloads") or {}


def test_stall_and_recovery_of_a_stand_in_vllm(tmp_path, agent_factory, serving):
    www = tmp_path / "www"
    www.mkdir()
    write_metrics(www, 1, 2, 0)
    name = serving(HTTPD, www)
    env = agent_env(tmp_path, workload_scrape_sec=SCRAPE_S, workload_stall_sec=STALL_S)
    agent = agent_factory(env, argv=INVENTORY_ONLY).start()
    state_dir = tmp_path / "state"
    wait_for(lambda: (workloads(agent).get("containers") or {}).get(name, {}).get("scrape") == "ok", 30)

    for tokens in range(1, 2 * (STALL_S + SCRAPE_S) + 1):  # busy and advancing: no event
        write_metrics(www, 1, 2, tokens * 10)
        time.sleep(0.5)
    assert workload_events(state_dir, [name]) == []

    frozen_at = time.time()  # busy, frozen from here
    (stalled,) = wait_for(lambda: workload_events(state_dir, [name]), STALL_S + 20, 0.1, "workload.stalled")
    late = stalled["time"] - frozen_at
    print(f"stalled reported {late:.1f} s after the counter froze (limit {STALL_S} s + one scrape {SCRAPE_S} s)")
    assert stalled["type"] == "workload.stalled" and stalled["name"] == name and stalled["cluster"] == "c1"
    assert stalled["engine"] == "vllm" and stalled["requests"]["vllm:num_requests_waiting"] == 2
    assert STALL_S - 0.5 <= late <= STALL_S + SCRAPE_S + 1.5, late  # 1.5 s for a loaded 2-core machine

    stalled_metric = lambda: get(agent).value("faden_agent_workload_stalled", container=name) == 1  # noqa: E731
    wait_for(stalled_metric, 10, 0.2, "workload_stalled 1 in /metrics")

    write_metrics(www, 1, 2, 10_000)  # moving again
    events = wait_for(lambda: workload_events(state_dir, [name])[1:], 20, 0.1, "workload.recovered")
    assert events[0]["type"] == "workload.recovered" and events[0]["recovered_by"] == "progress"

    write_metrics(www, 0, 0, 10_000)  # idle and frozen: no stall
    time.sleep(STALL_S + 3 * SCRAPE_S)
    assert [e["type"] for e in workload_events(state_dir, [name])] == ["workload.stalled", "workload.recovered"]
    assert (agent.workers()["inventory"]["restarts"]) == 0


def test_hanging_huge_and_garbage_endpoints_end_as_reasons(tmp_path, agent_factory, serving):
    huge, garbage, hang = tmp_path / "huge", tmp_path / "garbage", tmp_path / "hang"
    for www in (huge, garbage, hang / "cgi-bin"):
        www.mkdir(parents=True)
    (hang / "cgi-bin" / "metrics").write_text("#!/bin/sh\nsleep 3600\n")  # httpd runs it per request
    (hang / "cgi-bin" / "metrics").chmod(0o755)
    with open(huge / "metrics", "wb") as out:
        out.truncate(1 << 30)  # 1 GB, sparse: httpd sends every byte of it
    (garbage / "metrics").write_bytes(os.urandom(256 << 10))
    names = {
        "timeout": serving(HTTPD, hang, path="/cgi-bin/metrics"),
        "too_large": serving(HTTPD, huge),
        "not_metrics": serving(HTTPD, garbage),
    }
    env = agent_env(tmp_path, workload_scrape_sec=SCRAPE_S, workload_stall_sec=STALL_S)
    agent = agent_factory(env, argv=INVENTORY_ONLY).start()

    def reasons():
        containers = workloads(agent).get("containers") or {}
        return {reason: (containers.get(name) or {}).get("scrape") for reason, name in names.items()}

    try:
        wait_for(lambda: reasons() == {r: r for r in names}, 60, 0.2, "the three reasons")
    except AssertionError:
        raise AssertionError(f"{workloads(agent)}\n{agent.log_text()[-3000:]}") from None
    rounds = workloads(agent)["rounds"]
    wait_for(lambda: workloads(agent)["rounds"] >= rounds + 2, 60, 0.2, "two more rounds")  # still scraping
    inventory = agent.workers()["inventory"]
    assert inventory["state"] == "RUNNING" and inventory["restarts"] == 0
    assert inventory["rss_bytes"] < 150 << 20, inventory  # a 1 GB answer is never held
    assert workload_events(tmp_path / "state", list(names.values())) == []
    scrape = get(agent)
    for outcome, name in names.items():
        assert scrape.value("faden_agent_workload_scrape", container=name, outcome=outcome) == 1
        assert scrape.value("faden_agent_workload_stalled", container=name) == 0
    assert promtool_check(scrape.body) == ""
