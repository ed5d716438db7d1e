"""GPU activity as DCGM's profiling fields measure it, from NVML's GPM (Hopper and later): SM
active, SM occupancy, tensor active and DRAM bandwidth (percent) per GPU and MIG GPU instance,
over the interval between two GPU probe rounds (two samples kept per GPU: no wait in a round).
A GPU, driver or binding without GPM gets `available: false` and the reason; its other
figures stay as they are."""

from __future__ import annotations

from typing import Any

# The figures, each an NVML_GPM_METRIC_* id (nvml.h), as DCGM names them.
FIGURES = {"sm_active": 2, "sm_occupancy": 3, "tensor_active": 5, "dram_active": 10}
NO_BINDINGS = "the NVML bindings have no GPM (nvidia-ml-py before 11.525)"
NO_DRIVER = "the driver's NVML has no GPM (before R520)"
NO_GPU = "this GPU has no GPM (Hopper or later has it)"

Key = tuple[str, int | None]  # (GPU uuid, GPU instance id; None: the whole GPU)


class GpmSampler:
    """Per GPU and GPU instance two NVML sample buffers, used in turn: each round fills the
    older one and reads the metrics between it and the other."""

    def __init__(self) -> None:
        self._support: dict[str, str | None] = {}  # uuid -> None (supported) or why not
        self._buffers: dict[Key, list[Any]] = {}
        self._latest: dict[Key, int] = {}  # which buffer holds the last sample

    def read(self, nvml: Any, handle: Any, device: dict[str, Any]) -> dict[str, Any]:
        """The GPU's `gpm` entry: available (the GPU has GPM) and why figures are missing;
        the figures go into device["usage"] and each MIG device's "usage" (in place)."""
        uuid = str(device.get("uuid"))
        reason = self._supported(nvml, handle, uuid)
        if reason is not None:
            return {"available": False, "reason": reason}
        problems = []
        for instance in (device.get("mig") or {}).get("devices") or ():
            gpu_instance = instance.get("gpu_instance_id") if isinstance(instance, dict) else None
            if isinstance(gpu_instance, int):
                instance["usage"], error = self._figures(nvml, handle, (uuid, gpu_instance))
                problems += [f"GPU instance {gpu_instance}: {error}"] if error else []
        figures, error = self._figures(nvml, handle, (uuid, None))
        device.setdefault("usage", {}).update(figures)
        problems = [error, *problems] if error else problems
        return {"available": True, "reason": "; ".join(problems)[:300] or None}

    def _supported(self, nvml: Any, handle: Any, uuid: str) -> str | None:
        if uuid not in self._support:
            query = getattr(nvml, "nvmlGpmQueryDeviceSupport", None)
            if query is None:
                return NO_BINDINGS  # not kept: the same answer every round, at no cost
            try:
                self._support[uuid] = None if query(handle).isSupportedDevice else NO_GPU
            except nvml.NVMLError as exc:
                if exc.value == nvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                    self._support[uuid] = NO_DRIVER
                else:
                    return f"nvmlGpmQueryDeviceSupport: {exc}"  # asked again next round
        return self._support[uuid]

    def _figures(self, nvml: Any, handle: Any, key: Key) -> tuple[dict[str, float], str | None]:
        """The figures between the key's last sample and a new one; ({}, why) without."""
        try:
            buffers = self._buffers.get(key)
            if buffers is None:
                buffers = self._buffers[key] = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
            latest = self._latest.pop(key, None)
            target = 1 - latest if latest is not None else 0
            if key[1] is None:
                nvml.nvmlGpmSampleGet(handle, buffers[target])
            else:
                nvml.nvmlGpmMigSampleGet(handle, key[1], buffers[target])
            self._latest[key] = target
            if latest is None:
                return {}, None  # the first sample: figures from the next round on
            return self._metrics(nvml, buffers[latest], buffers[target])
        except nvml.NVMLError as exc:
            self._drop(nvml, key)
            return {}, str(exc)[:200]

    def _metrics(self, nvml: Any, first: Any, second: Any) -> tuple[dict[str, float], str | None]:
        get = nvml.c_nvmlGpmMetricsGet_t()
        get.version = nvml.NVML_GPM_METRICS_GET_VERSION
        get.numMetrics = len(FIGURES)
        get.sample1, get.sample2 = first, second
        for slot, metric in enumerate(FIGURES.values()):
            get.metrics[slot].metricId = metric
        nvml.nvmlGpmMetricsGet(get)
        figures, missing = {}, []
        for slot, name in enumerate(FIGURES):
            metric = get.metrics[slot]
            if metric.nvmlReturn == 0:
                figures[name] = round(min(max(float(metric.value), 0.0), 100.0), 1)
            else:
                missing.append(name)
        return figures, (f"not measured: {', '.join(missing)}" if missing else None)

    def retain(self, nvml: Any, uuids: set[str]) -> None:
        """Free the samples of GPUs no longer there (called once per round)."""
        for key in [k for k in self._buffers if k[0] not in uuids]:
            self._drop(nvml, key)

    def _drop(self, nvml: Any, key: Key) -> None:
        self._latest.pop(key, None)
        for buffer in self._buffers.pop(key, ()):
            try:
                nvml.nvmlGpmSampleFree(buffer)
            except nvml.NVMLError:
                pass  # a lost GPU's buffer: nothing more to do
