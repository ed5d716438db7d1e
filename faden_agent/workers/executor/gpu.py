"""GPUs for containers: the spec's `gpus` -> a Docker device request for the NVIDIA driver
("all" -> every GPU, N -> any N, ["0", "GPU-uuid", ...] -> those; as `docker run --gpus`),
and the NVIDIA container stack's failures told apart by cause from the texts the engine and
nvidia-container-cli print, each with the one thing to do (docs/commands.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from docker.types import DeviceRequest

NVIDIA_DRIVER = "nvidia"
GPU_CAPABILITIES = [["gpu"]]

GPU_RUNTIME_MISSING = "gpu_runtime_missing"
GPU_DRIVER_MISMATCH = "gpu_driver_mismatch"
GPU_DRIVER_NOT_LOADED = "gpu_driver_not_loaded"
GPU_LOST = "gpu_lost"
GPU_DEVICE_MISSING = "gpu_device_missing"
GPU_RUNTIME_FAILED = "gpu_runtime_failed"

# Lowercase fragments of the texts, first match wins: nvidia-container-cli's own (quoted by
# the engine from the prestart hook: "stderr: nvidia-container-cli: initialization error:
# nvml error: driver/library version mismatch"), then the engine's without a runtime.
_CAUSES = (
    (GPU_DRIVER_MISMATCH, ("driver/library version mismatch", "nvml/rm version mismatch")),
    (GPU_DRIVER_NOT_LOADED, ("nvml error: driver not loaded", "load library failed: libnvidia-ml.so")),
    (GPU_LOST, ("gpu is lost", "fallen off the bus", "detection error: nvml error: unknown error")),
    (GPU_DEVICE_MISSING, ("unknown device",)),
    (
        GPU_RUNTIME_MISSING,
        ("could not select device driver", "unknown or invalid runtime name: nvidia", 'runtime "nvidia"'),
    ),
    (GPU_RUNTIME_FAILED, ("nvidia-container-cli",)),
)
# What to do about each: one clause, in the timeline's message and in `doctor`.
GPU_ADVICE = {
    GPU_DRIVER_MISMATCH: "the NVIDIA driver was upgraded but the old kernel module is still loaded: "
    "reboot the machine (or unload and reload the nvidia kernel modules)",
    GPU_DRIVER_NOT_LOADED: "the NVIDIA kernel module is not loaded: load it (modprobe nvidia) or reinstall the driver",
    GPU_LOST: "a GPU fell off the bus or is in an error state: see its health verdict in the inventory "
    "(gpu section), then reset it (nvidia-smi -r) or reboot",
    GPU_DEVICE_MISSING: "a GPU the spec names is not on this machine: compare the spec's `gpus` with the "
    "inventory's device list (index or UUID)",
    GPU_RUNTIME_MISSING: "this machine's Docker engine has no NVIDIA container runtime: install "
    "nvidia-container-toolkit and run `nvidia-ctk runtime configure --runtime=docker`",
    GPU_RUNTIME_FAILED: "the NVIDIA container toolkit failed: check `nvidia-container-cli info` and its configuration",
}


def device_requests(gpus: str | int | list[str] | None) -> list[DeviceRequest]:
    if gpus is None:
        return []
    from docker.types import DeviceRequest  # what a create needs: the Docker SDK is loaded for it

    if gpus == "all":
        return [DeviceRequest(driver=NVIDIA_DRIVER, count=-1, capabilities=GPU_CAPABILITIES)]
    if isinstance(gpus, int):
        return [DeviceRequest(driver=NVIDIA_DRIVER, count=gpus, capabilities=GPU_CAPABILITIES)]
    return [DeviceRequest(driver=NVIDIA_DRIVER, device_ids=list(gpus), capabilities=GPU_CAPABILITIES)]


def gpu_failure(error_text: Any) -> str | None:
    """The reason of an engine error that came from the NVIDIA container stack, else None."""
    text = str(error_text).lower()
    return next((reason for reason, fragments in _CAUSES if any(f in text for f in fragments)), None)
