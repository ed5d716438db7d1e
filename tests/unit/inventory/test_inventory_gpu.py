"""The GPU probe's inventory fields (MIG, processes, errors, init) against a Python imitation
of pynvml at the probe's boundary: real constants and exception classes, fake functions.
The real bindings against a C-level NVML (health, events, hangs, a lost GPU) are tested in
tests/integration/inventory/test_gpu_health.py; bench/gpu_probe.py runs on a machine with GPUs.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
import types
from dataclasses import dataclass, field

import pynvml

from faden_agent.workers.inventory.gpu import probe as gpu
from faden_agent.workers.inventory.gpu.events import GpuErrorWatcher
from faden_agent.workers.inventory.gpu.gpm import NO_BINDINGS
from faden_agent.workers.inventory.gpu.probe import (
    REASON_NO_DRIVER,
    REASON_NO_GPU,
    REASON_NO_LIBRARY,
    REASON_NO_PYNVML,
    GpuProbe,
)
from faden_agent.workers.inventory.probes import OVERRUN, Probe
from faden_agent.workers.threads import start_daemon

GiB = 1024**3


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    bus_id: str = "00000000:17:00.0"
    total: int = 80 * GiB
    used: int = 2 * GiB
    mig: tuple[int, int] | None = (0, 0)  # (current, pending); None: not supported
    mig_children: list[tuple[str, int]] = field(default_factory=list)  # (uuid, memory)
    ecc: int | None = 1
    processes: list[tuple[int, int]] = field(default_factory=list)  # (pid, used memory)
    fail: dict[str, int] = field(default_factory=dict)  # function name -> NVML error code
    hang: threading.Event | None = None  # set: calls block until it is released


class FakeNvml(types.ModuleType):
    """Stands in for the pynvml module: real constants and errors, fake devices."""

    def __init__(self, gpus: list[FakeGpu], init_error: int | None = None):
        super().__init__("fake_pynvml")
        for name in dir(pynvml):
            if name.startswith(("NVML_", "NVMLError", "nvmlEventType")):
                setattr(self, name, getattr(pynvml, name))
        self.gpus = gpus
        self.init_error = init_error
        self.init_calls = 0
        self.events: queue.Queue[int] = queue.Queue()  # pushed by a test: a GPU event
        self.event_support = True
        self.shutdowns = 0

    def _check(self, fn: str, gpu: FakeGpu) -> None:
        if gpu.hang is not None:
            gpu.hang.wait()
        if fn in gpu.fail:
            raise pynvml.NVMLError(gpu.fail[fn])

    def nvmlInit(self):
        self.init_calls += 1
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlEventSetCreate(self):
        return "event-set"

    def nvmlEventSetFree(self, event_set):
        pass

    def nvmlDeviceRegisterEvents(self, h, mask, event_set):
        assert mask == pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError
        if not self.event_support:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        try:
            code = self.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT) from None
        if code:
            raise pynvml.NVMLError(code)
        return types.SimpleNamespace(eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=79)

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlSystemGetDriverVersion(self):
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12040

    def nvmlSystemGetNVMLVersion(self):
        return "12.550.54.15"

    def nvmlDeviceGetHandleByIndex(self, index):
        self._check("nvmlDeviceGetHandleByIndex", self.gpus[index])
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, h):
        if isinstance(h, tuple):  # a MIG child handle
            return h[0]
        self._check("nvmlDeviceGetUUID", h)
        return h.uuid

    def nvmlDeviceGetName(self, h):
        self._check("nvmlDeviceGetName", h)
        return h.name.encode()  # older pynvml returns bytes: the probe must decode

    def nvmlDeviceGetPciInfo(self, h):
        self._check("nvmlDeviceGetPciInfo", h)
        return types.SimpleNamespace(busId=h.bus_id)

    def nvmlDeviceGetMemoryInfo(self, h):
        if isinstance(h, tuple):
            return types.SimpleNamespace(total=h[1], used=0, free=h[1])
        self._check("nvmlDeviceGetMemoryInfo", h)
        return types.SimpleNamespace(total=h.total, used=h.used, free=h.total - h.used)

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return (9, 0)

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlDeviceGetPowerUsage(self, h):
        self._check("nvmlDeviceGetPowerUsage", h)
        return 123_456

    def nvmlDeviceGetTemperature(self, h, sensor):
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return 41

    def nvmlDeviceGetUtilizationRates(self, h):
        return types.SimpleNamespace(gpu=37, memory=12)

    def nvmlDeviceGetMigMode(self, h):
        if h.mig is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return list(h.mig)

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, slot):
        if slot >= len(h.mig_children):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return h.mig_children[slot]

    def nvmlDeviceGetEccMode(self, h):
        if h.ecc is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [h.ecc, h.ecc]

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        return 5 if kind == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else 0

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in h.processes]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)


def two_gpus() -> list[FakeGpu]:
    return [
        FakeGpu("GPU-aaaa", processes=[(1, 4 * GiB)]),
        FakeGpu("GPU-bbbb", bus_id="00000000:2A:00.0", ecc=None, mig=None),
    ]


def test_two_gpus_report_every_field():
    result = GpuProbe(FakeNvml(two_gpus()))()
    assert result["available"] is True and result["reason"] is None
    assert result["driver_version"] == "550.54.15"
    assert result["cuda_driver_version"] == "12.4"
    first, second = result["devices"]
    # The imitation has none of the health functions: every signal unknown, verdict ok
    # (the health read is tested through the C library, tests/integration/inventory/test_gpu_health.py).
    assert first.pop("health")["verdict"] == "ok" and result["health"] == {"verdict": "ok", "reasons": []}
    assert first == {
        "index": 0,
        "state": "ok",
        "uuid": "GPU-aaaa",
        "name": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": "00000000:17:00.0",
        "memory_total": 80 * GiB,
        "compute_capability": "9.0",
        "power_limit_w": 700.0,
        "mig": {"enabled": False, "pending": False, "devices": []},
        "ecc": {"enabled": True, "uncorrected_volatile": 0, "uncorrected_aggregate": 0},
        "processes": [
            {
                "pid": 1,
                "name": first["processes"][0]["name"],
                "container_id": None,  # pid 1 here is in no Docker container
                "types": ["compute"],
                "usage": {"used_memory": 4 * GiB},
            }
        ],
        "usage": {
            "memory_used": 2 * GiB,
            "memory_free": 78 * GiB,
            "utilization_gpu": 37,
            "utilization_memory": 12,
            "temperature_c": 41,
            "power_draw_w": 123.5,
            "ecc_corrected_volatile": 5,
        },
        "gpm": {"available": False, "reason": NO_BINDINGS},  # the imitation has no GPM functions
    }
    assert first["processes"][0]["name"]  # pid 1 exists here, psutil names it
    # Not supported on this board: null, not an error.
    assert second["state"] == "ok" and second["mig"] is None and second["ecc"] is None
    assert second["index"] == 1 and second["pci_bus_id"] == "00000000:2A:00.0"


def test_an_nvml_error_on_one_gpu_marks_it_and_keeps_the_other():
    gpus = two_gpus()
    gpus[0].fail["nvmlDeviceGetMemoryInfo"] = pynvml.NVML_ERROR_GPU_IS_LOST
    result = GpuProbe(FakeNvml(gpus))()
    broken, healthy = result["devices"]
    assert broken["state"] == "error" and broken["error"] == "GPU is lost"
    assert broken["uuid"] == "GPU-aaaa" and "usage" not in broken  # what was read before the error stays
    assert healthy["state"] == "ok" and healthy["usage"]["memory_free"] == 78 * GiB


def test_unsupported_power_reading_is_null_not_an_error():
    gpus = two_gpus()
    gpus[1].fail["nvmlDeviceGetPowerUsage"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    device = GpuProbe(FakeNvml(gpus))()["devices"][1]
    assert device["state"] == "ok" and device["usage"]["power_draw_w"] is None


def test_mig_enabled_lists_its_instances():
    gpu = FakeGpu("GPU-mig", mig=(1, 1), mig_children=[("MIG-1111", 10 * GiB), ("MIG-2222", 20 * GiB)])
    device = GpuProbe(FakeNvml([gpu]))()["devices"][0]
    assert device["mig"] == {
        "enabled": True,
        "pending": True,
        "devices": [
            {"slot": 0, "uuid": "MIG-1111", "memory_total": 10 * GiB, "gpu_instance_id": None},
            {"slot": 1, "uuid": "MIG-2222", "memory_total": 20 * GiB, "gpu_instance_id": None},
        ],
    }


def test_library_missing_gives_an_empty_list_with_a_reason():
    fake = FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    result = GpuProbe(fake)()
    assert result == {
        "available": False,
        "reason": REASON_NO_LIBRARY,
        "driver_version": None,
        "cuda_driver_version": None,
        "nvml_version": None,
        "devices": [],
        "health": {"verdict": "ok", "reasons": []},
    }


def test_real_pynvml_here_has_no_library():
    # The real module on this GPU-less machine: the same answer as the fake above.
    assert GpuProbe()()["reason"] == REASON_NO_LIBRARY


def test_no_driver_and_no_gpu_have_their_reasons():
    assert GpuProbe(FakeNvml([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))()["reason"] == REASON_NO_DRIVER
    result = GpuProbe(FakeNvml([]))()
    assert result["available"] is False and result["reason"] == REASON_NO_GPU and result["devices"] == []


def test_no_pynvml_module(monkeypatch):
    monkeypatch.setattr(gpu, "NVML_LIBRARY", "libc.so.6")  # a library that opens here
    monkeypatch.setitem(sys.modules, "pynvml", None)  # what an uninstalled pynvml gives
    assert GpuProbe()()["reason"] == REASON_NO_PYNVML


NO_BINDINGS_WITHOUT_LIBRARY = """
import sys
from faden_agent.workers.inventory.gpu.probe import GpuProbe
from faden_agent.workers.inventory.gpu.events import GpuErrorWatcher
print(GpuProbe()()["reason"])
import threading
from faden_agent.workers.threads import start_daemon
watcher = GpuErrorWatcher(lambda: None, threading.Event())
watcher.start(start_daemon)
watcher.thread.join(10)
print(watcher.thread.is_alive(), "pynvml" in sys.modules)
"""


def test_without_the_nvml_library_pynvml_is_never_imported():
    # A fresh interpreter on this GPU-less machine: the probe and the event watcher give up
    # on the missing library before importing the 2.4 MiB of bindings.
    out = subprocess.run(
        [sys.executable, "-c", NO_BINDINGS_WITHOUT_LIBRARY], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.splitlines() == [REASON_NO_LIBRARY, "False False"], out.stdout + out.stderr


def test_init_once_and_again_after_the_driver_went_away():
    fake = FakeNvml(two_gpus())
    probe = GpuProbe(fake)
    probe()
    probe()
    assert fake.init_calls == 1
    fake.gpus[0].fail["nvmlDeviceGetUUID"] = pynvml.NVML_ERROR_UNINITIALIZED
    assert probe()["devices"][0]["state"] == "error"
    fake.gpus[0].fail.clear()
    assert probe()["devices"][0]["state"] == "ok"
    assert fake.init_calls == 2


def test_a_hanging_nvml_call_is_reported_as_overrun_without_piling_up_threads():
    release = threading.Event()
    gpus = two_gpus()
    gpus[1].hang = release
    probe = Probe("gpu", GpuProbe(FakeNvml(gpus)), timeout_s=0.3)
    try:
        started = time.monotonic()
        probe.start()
        result = probe.wait()
        assert result.status == OVERRUN and time.monotonic() - started < 2
        for _ in range(3):  # later rounds: still the same stuck call, no new thread
            probe.start()
            again = probe.wait()
            assert again.status == OVERRUN and again.since == result.since
        assert [t.name for t in threading.enumerate()].count("probe-gpu") == 1
    finally:
        release.set()
    gpus[1].hang = None
    deadline = time.monotonic() + 5
    while probe.stuck() and time.monotonic() < deadline:
        time.sleep(0.01)
    probe.start()
    assert probe.wait().data["devices"][1]["state"] == "ok"


def watch(fake: FakeNvml) -> tuple[GpuErrorWatcher, threading.Event]:
    seen = threading.Event()
    watcher = GpuErrorWatcher(seen.set, threading.Event(), nvml=fake)
    watcher.start(start_daemon)
    return watcher, seen


def test_a_gpu_error_event_calls_for_a_record_at_once():
    fake = FakeNvml(two_gpus())
    watcher, seen = watch(fake)
    try:
        assert not seen.wait(0.3)  # quiet GPUs: wait timeouts are not changes
        assert watcher.watching == 2
        fake.events.put(0)  # an Xid 79 ("fallen off the bus") event
        assert seen.wait(3)
    finally:
        watcher.stop()
        watcher.thread.join(3)
    assert not watcher.thread.is_alive() and fake.shutdowns == 1


def test_a_lost_gpu_during_the_wait_is_a_change_too():
    fake = FakeNvml(two_gpus())
    watcher, seen = watch(fake)
    try:
        fake.events.put(pynvml.NVML_ERROR_GPU_IS_LOST)
        assert seen.wait(3)
    finally:
        watcher.stop()
        watcher.thread.join(3)
    assert not watcher.thread.is_alive()


def test_nothing_to_watch_ends_the_thread_quietly():
    unsupported = FakeNvml(two_gpus())
    unsupported.event_support = False
    for fake in (unsupported, FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND), FakeNvml([])):
        watcher, seen = watch(fake)
        watcher.thread.join(3)
        assert not watcher.thread.is_alive() and not seen.is_set() and watcher.watching == 0
