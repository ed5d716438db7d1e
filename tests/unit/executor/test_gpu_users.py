"""Who uses a GPU (gpu.check, gpu.reset), from what the engine says of each running container
and what NVML lists on the GPU: device ids by index or uuid, `all` and bare counts (the engine
does not say which GPUs: every one), NVML's processes of a container, processes outside any."""

from __future__ import annotations

from types import SimpleNamespace

from faden_agent.workers.executor.gpu_users import outside, users_of

GPUS = {
    "GPU-a": {"index": 0, "processes": [{"pid": 5, "name": "vllm", "container_id": "id-listed"}]},
    "GPU-b": {"index": 1, "processes": [{"pid": 9, "name": "python3", "container_id": None}]},
}


def container(name: str, host: dict | None = None, env: list[str] | None = None) -> SimpleNamespace:
    attrs = {"HostConfig": host or {}, "Config": {"Env": env or []}}
    return SimpleNamespace(name=name, id=f"id-{name}", attrs=attrs)


def test_each_way_a_container_uses_a_gpu():
    nvidia = {"Driver": "nvidia", "Capabilities": [["gpu"]]}
    running = [
        container("by-index", {"DeviceRequests": [{**nvidia, "DeviceIDs": ["1"]}]}),
        container("by-uuid", env=["NVIDIA_VISIBLE_DEVICES=GPU-a"]),
        container("every", {"DeviceRequests": [{**nvidia, "Count": -1}]}),
        container("two", {"DeviceRequests": [{**nvidia, "Count": 2}]}),
        container("none", env=["NVIDIA_VISIBLE_DEVICES=void", "PATH=/bin"]),
        container("listed"),  # no GPU asked, but NVML lists its process on GPU 0
        container("hostile", {"DeviceRequests": "x"}, ["NVIDIA_VISIBLE_DEVICES=,,"]),
    ]
    users = users_of(running, GPUS)
    said = {uuid: [u.said() for u in found] for uuid, found in users.items()}
    assert said["GPU-a"] == [
        "by-uuid (device ids)",
        "every (every GPU)",
        "two (2 GPUs, which ones unsaid)",
        "listed (NVML lists its processes)",
    ]
    assert said["GPU-b"] == ["by-index (device ids)", "every (every GPU)", "two (2 GPUs, which ones unsaid)"]
    assert outside(GPUS["GPU-b"]) == ["pid 9 (python3)"] and outside(GPUS["GPU-a"]) == []
