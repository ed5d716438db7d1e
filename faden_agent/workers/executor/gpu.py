"""GPUs for containers: the spec's `gpus` -> a Docker device request for the NVIDIA driver.

"all" -> every GPU (count -1), N -> any N GPUs, ["0", "GPU-uuid", ...] -> those devices;
the same request `docker run --gpus` makes. Without the NVIDIA container runtime the engine
answers with "could not select device driver"; that becomes `gpu_runtime_missing`.
"""

from __future__ import annotations

from typing import Any

from docker.types import DeviceRequest

NVIDIA_DRIVER = "nvidia"
GPU_CAPABILITIES = [["gpu"]]
_MISSING_RUNTIME_MARKERS = (
    'could not select device driver "nvidia"',
    "could not select device driver",
    "nvidia-container-cli",
    "unknown or invalid runtime name: nvidia",
)


def device_requests(gpus: str | int | list[str] | None) -> list[DeviceRequest]:
    if gpus is None:
        return []
    if gpus == "all":
        return [DeviceRequest(driver=NVIDIA_DRIVER, count=-1, capabilities=GPU_CAPABILITIES)]
    if isinstance(gpus, int):
        return [DeviceRequest(driver=NVIDIA_DRIVER, count=gpus, capabilities=GPU_CAPABILITIES)]
    return [DeviceRequest(driver=NVIDIA_DRIVER, device_ids=list(gpus), capabilities=GPU_CAPABILITIES)]


def is_gpu_runtime_missing(error_text: Any) -> bool:
    text = str(error_text)
    return any(marker in text for marker in _MISSING_RUNTIME_MARKERS)
