"""GPM and MIG devices in the C-level GPU's state (tests/nvml/gpm.c reads them):
`with_gpm(gpu, sm_active=61.5, ...)` marks a GPU dict of GpuState as having GPM with those
figures (percent); `MigGpuState` also writes MIG devices, each a GPU dict of its own at a
device index past the GPUs the count gives out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.nvml.state import GpuState

METRIC_IDS = {"sm_active": 2, "sm_occupancy": 3, "tensor_active": 5, "dram_active": 10}  # NVML_GPM_METRIC_*
MIG_FIRST_INDEX = 32  # the device index of the first MIG device (fakenvml.c's MAX_GPUS is 64)


def gpm_values(**figures: float) -> dict[str, int]:
    """{"2": 61500, ...}: each figure in thousandths of a percent under its metric id."""
    return {str(METRIC_IDS[name]): round(value * 1000) for name, value in figures.items()}


def with_gpm(gpu: dict[str, Any], **figures: float) -> dict[str, Any]:
    gpu["gpm"] = {"supported": 1, **gpm_values(**figures)}
    return gpu


class MigGpuState(GpuState):
    """GpuState with MIG devices: add_mig(gpu, gpu_instance, uuid, memory, **figures)."""

    def __init__(self, directory: Path, count: int = 2):
        self.mig_devices: dict[int, dict[str, Any]] = {}
        super().__init__(directory, count)

    def add_mig(self, gpu: int, gpu_instance: int, uuid: str, memory: int, **figures: float) -> None:
        parent = self.gpus[gpu]
        slot = parent.get("mig_max", 0)
        index = MIG_FIRST_INDEX + len(self.mig_devices)
        parent.update(mig_current=1, mig_pending=1, mig_max=slot + 1)
        parent.setdefault("mig", {})[str(slot)] = index
        parent.setdefault("gpm_mig", {})[str(gpu_instance)] = gpm_values(**figures)
        self.mig_devices[index] = {"uuid": uuid, "memory_total": memory, "gpu_instance_id": gpu_instance}
        self.write()

    def flat(self) -> dict[str, int | str]:
        flat = super().flat()
        for index, device in self.mig_devices.items():
            flat.update({f"gpu.{index}.{key}": value for key, value in device.items()})
        return flat
