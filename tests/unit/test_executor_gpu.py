"""The gpus -> device request mapping, checked against the docker SDK's own types and the
HostConfig it sends to the engine (the same request `docker run --gpus` makes)."""

from __future__ import annotations

from docker.types import DeviceRequest, HostConfig

from faden_agent.workers.executor.gpu import device_requests, is_gpu_runtime_missing


def host_config_requests(gpus):
    return HostConfig(version="1.41", device_requests=device_requests(gpus))["DeviceRequests"]


def test_all_gpus():
    (request,) = device_requests("all")
    assert isinstance(request, DeviceRequest)
    assert host_config_requests("all") == [
        {"Driver": "nvidia", "Count": -1, "DeviceIDs": [], "Capabilities": [["gpu"]], "Options": {}}
    ]


def test_a_count_of_gpus():
    assert host_config_requests(2) == [
        {"Driver": "nvidia", "Count": 2, "DeviceIDs": [], "Capabilities": [["gpu"]], "Options": {}}
    ]


def test_gpus_by_index_or_uuid():
    ids = ["0", "GPU-8f6a3b1c-0000-1111-2222-333344445555"]
    assert host_config_requests(ids) == [
        {"Driver": "nvidia", "Count": 0, "DeviceIDs": ids, "Capabilities": [["gpu"]], "Options": {}}
    ]


def test_no_gpus_no_request():
    assert device_requests(None) == []


def test_missing_runtime_is_recognised_from_the_engine_message():
    assert is_gpu_runtime_missing('could not select device driver "nvidia" with capabilities: [[gpu]]')
    assert not is_gpu_runtime_missing("No such image: x")
