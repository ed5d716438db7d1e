"""Forward progress of serving containers: the metric lines read, the stall rule (idle is no
stall, a frozen counter with requests in flight is), and the spec's metrics_port."""

from __future__ import annotations

import pytest

from faden_agent.workers.executor.commands import KINDS
from faden_agent.workers.executor.specs import SpecError
from faden_agent.workers.inventory.workloads.progress import RECOVERED, STALLED, Progress, reading
from faden_agent.workers.inventory.workloads.promtext import add_samples, parse_line
from faden_agent.workers.inventory.workloads.watcher import advertised, endpoint

VLLM = b"""# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a"} 2.0
vllm:num_requests_running{model_name="b"} 1.0
vllm:num_requests_waiting{model_name="a"} 4.0
vllm:generation_tokens_total{model_name="a"} 1.5e3
vllm:generation_tokens_created{model_name="a"} 1.7e9
vllm:iteration_tokens_total_count{model_name="a"} 77
vllm:iteration_tokens_total_bucket{le="1.0",model_name="a"} 3.0
"""


def samples(text: bytes) -> dict[str, float]:
    totals: dict[str, float] = {}
    add_samples(totals, text.splitlines())
    return totals


def test_vllm_samples_are_summed_over_label_sets_and_others_skipped():
    assert samples(VLLM) == {
        "vllm:num_requests_running": 3.0,
        "vllm:num_requests_waiting": 4.0,
        "vllm:generation_tokens_total": 1500.0,
        "vllm:iteration_tokens_total_count": 77.0,
    }
    assert reading(samples(VLLM))["engine"] == "vllm" and reading(samples(VLLM))["in_flight"] == 7.0


@pytest.mark.parametrize(
    "line",
    [
        b"vllm:num_requests_running NaN",
        b"vllm:num_requests_running +Inf",
        b"vllm:num_requests_running{",
        b"vllm:num_requests_running",
        b"vllm:num_requests_running notanumber",
        b"\xff\xfe garbage",
        b"vllm:num_requests_running 1" + b" " * (17 << 10),
    ],
)
def test_garbage_lines_are_skipped(line):
    assert parse_line(line) is None


def test_ray_serve_names():
    text = b"""ray_serve_replica_processing_queries{deployment="d",replica="r1"} 1
ray_serve_deployment_queued_queries{deployment="d"} 2
ray_serve_deployment_request_counter_total{deployment="d",replica="r1"} 40
"""
    current = reading(samples(text))
    assert current["engine"] == "ray_serve" and current["in_flight"] == 3
    assert current["counters"] == {"ray_serve_deployment_request_counter_total": 40}


def vllm(running: float, waiting: float, tokens: float) -> dict[str, float]:
    return {
        "vllm:num_requests_running": running,
        "vllm:num_requests_waiting": waiting,
        "vllm:generation_tokens_total": tokens,
    }


def test_stalled_only_when_busy_and_frozen_for_the_limit_then_recovered():
    progress = Progress(stall_s=60)
    assert progress.update(vllm(1, 2, 100), now=0) is None
    assert progress.update(vllm(1, 2, 200), now=30) is None  # moving
    assert progress.update(vllm(1, 2, 200), now=60) is None  # frozen 30 s
    kind, details = progress.update(vllm(1, 2, 200), now=90)
    assert kind == STALLED and details["stalled_for_s"] == 60 and details["requests"]["vllm:num_requests_waiting"] == 2
    assert progress.update(vllm(1, 2, 200), now=120) is None  # reported once
    kind, details = progress.update(vllm(1, 2, 201), now=150)
    assert kind == RECOVERED and details["recovered_by"] == "progress" and details["stalled_for_s"] == 120


def test_idle_is_never_a_stall_and_ends_one():
    progress = Progress(stall_s=10)
    for now in range(0, 100, 10):
        assert progress.update(vllm(0, 0, 5), now=now) is None
    assert progress.update(vllm(0, 1, 5), now=100) is None
    assert progress.update(vllm(0, 1, 5), now=110)[0] == STALLED
    kind, details = progress.update(vllm(0, 0, 5), now=120)
    assert kind == RECOVERED and details["recovered_by"] == "idle"


def test_a_counter_that_went_back_is_a_restart_not_a_stall():
    progress = Progress(stall_s=10)
    progress.update(vllm(1, 0, 500), now=0)
    assert progress.update(vllm(1, 0, 3), now=10) is None
    assert progress.update(vllm(1, 0, 3), now=15) is None


def test_endpoint_from_docker_list_entry():
    base = {"Labels": {"io.fadenstack.metrics-port": "8000"}}
    bridge = {**base, "NetworkSettings": {"Networks": {"bridge": {"IPAddress": "172.17.0.5"}}}}
    assert endpoint(bridge) == ("172.17.0.5", 8000, "/metrics")
    host = {**base, "HostConfig": {"NetworkMode": "host"}}
    assert endpoint(host) == ("127.0.0.1", 8000, "/metrics")
    assert "not a port" in endpoint({"Labels": {"io.fadenstack.metrics-port": "99999"}})
    bad_path = {"Labels": {"io.fadenstack.metrics-port": "8000", "io.fadenstack.metrics-path": "/a b"}}
    assert "not a URL path" in endpoint(bad_path)
    assert "no IP address" in endpoint(base)


def run_spec(**extra):
    return KINDS["container.run"].validate({"name": "v", "image": "i", **extra})


def test_spec_metrics_port_and_path():
    spec = run_spec(metrics_port=8000, metrics_path="/metrics")
    assert spec["metrics_port"] == 8000 and spec["metrics_path"] == "/metrics"
    for bad in (0, 65536, "8000", True):
        with pytest.raises(SpecError, match="'metrics_port' must be a port"):
            run_spec(metrics_port=bad)
    with pytest.raises(SpecError, match="'metrics_path' must be a URL path"):
        run_spec(metrics_port=8000, metrics_path="metrics")


def test_advertised_address_for_prometheus_elsewhere():
    host_net = {"HostConfig": {"NetworkMode": "host"}}
    assert advertised(host_net, "127.0.0.1", 8000, "10.0.0.5") == "10.0.0.5:8000"
    published = {"Ports": [{"PrivatePort": 8000, "PublicPort": 18000, "IP": "0.0.0.0", "Type": "tcp"}]}
    assert advertised(published, "172.17.0.2", 8000, "10.0.0.5") == "10.0.0.5:18000"
    on_one = {"Ports": [{"PrivatePort": 8000, "PublicPort": 18000, "IP": "192.0.2.7", "Type": "tcp"}]}
    assert advertised(on_one, "172.17.0.2", 8000, "10.0.0.5") == "192.0.2.7:18000"
    loopback = {"Ports": [{"PrivatePort": 8000, "PublicPort": 18000, "IP": "127.0.0.1", "Type": "tcp"}]}
    assert advertised(loopback, "172.17.0.2", 8000, "10.0.0.5") == "172.17.0.2:8000"
    assert advertised({}, "172.17.0.2", 8000, "10.0.0.5") == "172.17.0.2:8000"


def test_the_spec_field_becomes_the_label_the_inventory_reads():
    from types import SimpleNamespace

    from faden_agent.workers.executor.commands.container import _labels

    spec = run_spec(metrics_port=8000, metrics_path="/v1/metrics")
    labels = _labels(SimpleNamespace(config=SimpleNamespace(agent_id="a")), SimpleNamespace(spec=spec, id="c1"))
    assert endpoint({"Labels": labels, "HostConfig": {"NetworkMode": "host"}}) == ("127.0.0.1", 8000, "/v1/metrics")
    assert "io.fadenstack.metrics-port" not in _labels(
        SimpleNamespace(config=SimpleNamespace(agent_id="a")), SimpleNamespace(spec=run_spec(), id="c2")
    )


def test_a_round_survives_a_container_it_cannot_handle_and_an_engine_away():
    from faden_agent.workers.inventory.workloads.watcher import WorkloadWatcher

    odd = [{"Id": "x", "Names": None, "Labels": {"io.fadenstack.metrics-port": "1"}}, {"Id": "y", "Labels": "?"}]
    watcher = WorkloadWatcher(lambda: odd, lambda data, record_id: None, 1.0, 10.0)
    watcher.round()
    assert watcher.rounds == 1 and watcher.status()["containers"]["x"]["scrape"] == "no_endpoint"

    def away():
        raise ConnectionError("engine away")

    watcher.list_containers = away
    watcher.round()
    assert watcher.status()["list_error"] == "ConnectionError: engine away"
