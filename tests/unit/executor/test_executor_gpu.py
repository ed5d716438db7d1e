"""The gpus -> device request mapping, checked against the docker SDK's own types and the
HostConfig it sends to the engine (the same request `docker run --gpus` makes)."""

from __future__ import annotations

from docker.types import DeviceRequest, HostConfig

from faden_agent.workers.executor.gpu import device_requests, gpu_failure


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


# The engine's whole answers as users met them (NVIDIA/nvidia-container-toolkit and
# NVIDIA/nvidia-docker issues 394, 1451, 1393, 1280, 1264, 1660), by the reason each must get.
ENGINE_TEXTS = {
    "gpu_driver_mismatch": [
        "failed to create shim task: OCI runtime create failed: runc create failed: unable to start container "
        "process: error during container init: error running hook #0: error running hook: exit status 1, "
        "stdout: , stderr: Auto-detected mode as 'legacy'\nnvidia-container-cli: initialization error: nvml "
        "error: driver/library version mismatch: unknown",
        'OCI runtime create failed: container_linux.go:349: starting container process caused "process_linux.go:'
        '449: container init caused \\"process_linux.go:432: running prestart hook 1 caused \\\\\\"error '
        "running hook: exit status 1, stdout: , stderr: nvidia-container-cli: initialization error: nvml error: "
        'driver/library version mismatch\\\\\\\\n\\\\\\"\\"": unknown',
    ],
    "gpu_driver_not_loaded": [
        "OCI runtime create failed: container_linux.go:380: starting container process caused: process_linux.go:"
        "545: container init caused: Running hook #0:: error running hook: exit status 1, stdout: , stderr: "
        "nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown",
        "error running hook #0: error running hook: exit status 1, stdout: , stderr: nvidia-container-cli: "
        "initialization error: load library failed: libnvidia-ml.so.1: cannot open shared object file: no such "
        "file or directory: unknown",
    ],
    "gpu_lost": [
        "error running hook: exit status 1, stdout: , stderr: nvidia-container-cli: detection error: nvml error: "
        "unknown error: unknown",
        "nvidia-container-cli: detection error: nvml error: gpu is lost: unknown",
    ],
    "gpu_device_missing": [
        "error running hook: exit status 1, stdout: , stderr: nvidia-container-cli: device error: unknown device "
        "id: 2: unknown",
        "stderr: Auto-detected mode as 'legacy'\nnvidia-container-cli: device error: false: unknown device: unknown",
    ],
    "gpu_runtime_missing": [
        'could not select device driver "nvidia" with capabilities: [[gpu]]',
        'could not select device driver "" with capabilities: [[gpu]]',
        "unknown or invalid runtime name: nvidia",
    ],
    "gpu_runtime_failed": [
        "error running hook #0: error running hook: exit status 1, stdout: , stderr: nvidia-container-cli: "
        "container error: cgroup subsystem devices not found: unknown",
        "stderr: nvidia-container-cli: ldcache error: process /sbin/ldconfig failed with error code: 1: unknown",
    ],
}


def test_each_nvidia_stack_failure_is_told_by_its_cause():
    for reason, texts in ENGINE_TEXTS.items():
        for text in texts:
            assert gpu_failure(text) == reason, text
    assert gpu_failure("No such image: x") is None
    assert gpu_failure("driver failed programming external connectivity on endpoint x") is None
