"""Prometheus finds the workloads: a real Prometheus (Debian's 2.42) whose only scrape config
is an http_sd_configs entry pointing at a real agent's /sd/workloads discovers a stand-in
serving container (busybox httpd) with the machine, cluster and container labels and
scrapes its vLLM metrics."""

from __future__ import annotations

import shutil
import subprocess
import uuid

import pytest
import requests

from faden_agent import protocol
from tests.conftest import TEST_IMAGE, require
from tests.support.agentproc import agent_env, free_port, wait_for
from tests.support.metricsclient import endpoint
from tests.support.sampleworkers import supervisor_argv

pytestmark = pytest.mark.docker

INVENTORY_ONLY = supervisor_argv({"inventory": "faden_agent.workers.inventory.worker:InventoryWorker"})


@pytest.fixture
def prometheus(tmp_path):
    """start(sd_url) -> the base URL of a Prometheus discovering through sd_url."""
    binary = shutil.which("prometheus")
    if binary is None:
        require("prometheus", "it is not installed (tests/infra/start-services.sh unpacks it)")
    started = []

    def start(sd_url):
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
            "scrape_configs:\n"
            "  - job_name: workloads\n"
            f"    http_sd_configs: [{{url: '{sd_url}', refresh_interval: 1s}}]\n"
        )
        port = free_port()
        log = open(tmp_path / "prometheus.log", "wb")
        started.append(
            subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}"]
                + [f"--web.listen-address=127.0.0.1:{port}"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        return f"http://127.0.0.1:{port}"

    yield start
    for process in started:
        process.terminate()
        process.wait(10)


def test_prometheus_discovers_and_scrapes_a_serving_container(tmp_path, agent_factory, docker_client, prometheus):
    www = tmp_path / "www"
    www.mkdir()
    (www / "metrics").write_text('vllm:num_requests_running{model_name="m"} 3\n')
    name = f"faden-i43-sd-{uuid.uuid4().hex[:8]}"
    labels = {
        protocol.LABEL_MANAGED: "true",
        protocol.LABEL_METRICS_PORT: "8000",
        protocol.LABEL_CLUSTER: "c7",
        protocol.LABEL_WORKLOAD: "llama",
    }
    container = docker_client.containers.run(
        TEST_IMAGE,
        ["busybox", "httpd", "-f", "-p", "8000", "-h", "/www"],
        name=name,
        labels=labels,
        volumes={str(www): {"bind": "/www", "mode": "ro"}},
        detach=True,
    )
    try:
        env = agent_env(tmp_path, workload_scrape_sec=1, agent_id="machine-7")
        agent = agent_factory(env, argv=INVENTORY_ONLY).start()
        host, port = endpoint(agent)
        sd_url = f"http://{host}:{port}/sd/workloads"

        def discovered():  # tests beside this one run containers on the same engine: only ours
            groups = requests.get(sd_url, timeout=5).json()
            return [g for g in groups if g["labels"]["container"] == name]

        groups = wait_for(discovered, 30, 0.2, "a discovered container")
        container.reload()
        address = container.attrs["NetworkSettings"]["IPAddress"]
        assert groups == [
            {
                "targets": [f"{address}:8000"],
                "labels": {
                    "__metrics_path__": "/metrics",
                    "machine": "machine-7",
                    "container": name,
                    "cluster": "c7",
                    "workload": "llama",
                },
            }
        ]

        base = prometheus(sd_url)

        def scraped():
            try:
                query = {"query": f'vllm:num_requests_running{{container="{name}"}}'}
                answer = requests.get(f"{base}/api/v1/query", params=query, timeout=5)
            except requests.ConnectionError:
                return None
            result = answer.json()["data"]["result"]
            return result[0] if result else None

        sample = wait_for(scraped, 60, 0.5, "Prometheus' first scrape of the discovered container")
        assert sample["value"][1] == "3"
        metric = sample["metric"]
        assert (metric["machine"], metric["cluster"], metric["container"], metric["workload"]) == (
            "machine-7",
            "c7",
            name,
            "llama",
        )
        assert metric["instance"] == f"{address}:8000" and metric["job"] == "workloads"
    finally:
        container.remove(force=True)
