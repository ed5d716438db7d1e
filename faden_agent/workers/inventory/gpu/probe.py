"""GPUs through NVML (pynvml): the driver, and per GPU what placement needs and its health.
Every NVML call is named and timed while it runs (TracedNvml: a hung one is named); a GPU
is remembered by uuid and bus id (`seen`, kept across restarts): one gone is `missing`, a new
uuid at its bus id `replaced` it, one acknowledged gone for good is forgotten."""

from __future__ import annotations

import copy
import ctypes
import importlib
import os
import threading
import time
from collections.abc import Callable
from time import monotonic
from typing import Any

from faden_agent.workers.inventory.gpu.containers import container_of_pid
from faden_agent.workers.inventory.gpu.evidence import seen_at
from faden_agent.workers.inventory.gpu.health import HealthReader, node_health
from faden_agent.workers.inventory.gpu.kernel_xids import bus_key
from faden_agent.workers.inventory.gpu.rules import DEGRADED, OK, XIDS, xid_reason

REASON_NO_PYNVML = "pynvml (nvidia-ml-py) not installed"
REASON_NO_LIBRARY = "NVML library not found"
REASON_NO_DRIVER = "no NVIDIA driver loaded"
REASON_NO_GPU = "no GPU found"
NVML_LIBRARY = "libnvidia-ml.so.1"  # what pynvml itself opens on Linux
USERS_KEPT = 32  # containers remembered per GPU
USERS_KEEP_S = 86400.0
IDENTITY_CALLS = ("nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo", "nvmlDeviceGetName", "nvmlDeviceGetMemoryInfo")


def load_pynvml() -> tuple[Any, str | None]:
    """(the pynvml module, None), or (None, why not). pynvml is imported only where the NVML
    library opens: its bindings are 2.4 MiB of objects that a machine without the NVIDIA
    driver would carry in its inventory worker for nothing."""
    try:
        ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        return None, REASON_NO_LIBRARY
    try:
        return importlib.import_module("pynvml"), None
    except ImportError:
        return None, REASON_NO_PYNVML


def nvml_text(value: Any) -> Any:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


class TracedNvml:
    """pynvml with each function call named and timed while it runs (`calling`, `started`),
    so a call that never returns is named ("NVML call hung: <function>") and bounded on its
    own (`call_age`). About 1 us a call."""

    def __init__(self, nvml: Any):
        self._nvml = nvml
        self.calling: str | None = None
        self.started = 0.0  # time.monotonic() when `calling` began

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._nvml, name)
        if name.startswith("nvml") and callable(value) and not isinstance(value, type):
            value = self._traced(name, value)
        setattr(self, name, value)  # found in the instance from now on
        return value

    def _traced(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            self.started = monotonic()
            self.calling = name
            try:
                return fn(*args)
            finally:
                self.calling = None

        return call

    def call_age(self) -> float | None:
        """Seconds the call now in flight has run, None between calls (or after one raised)."""
        return monotonic() - self.started if self.calling is not None else None


class GpuProbe:
    def __init__(
        self,
        nvml: Any = None,
        health: HealthReader | None = None,
        clock: Callable[[], float] = time.time,
        notes: Callable[[dict[str, Any]], list[tuple[str, str]]] | None = None,
    ):
        """`nvml` is the pynvml module (imported on first use when None); tests pass a fake.
        `notes(section)`: the node's own (verdict, reason) pairs (the watch, the fabric manager)."""
        self.nvml: Any = TracedNvml(nvml) if nvml is not None else None
        self.health = health or HealthReader()
        self.clock = clock
        self.notes = notes
        self._initialized = False
        # uuid -> index, bus id and when last seen, of every GPU seen (evidence.py keeps it)
        self.seen: dict[str, dict[str, Any]] = {}
        # uuid -> {container id: when NVML last saw a process of it on that GPU} (death causes)
        self.users: dict[str, dict[str, float]] = {}
        self.replaced: list[dict[str, Any]] = []  # GPUs a new uuid replaced at their bus id, not yet reported
        self._reading: int | None = None  # the GPU index being read, for a hung call
        self.lock = threading.Lock()  # a round, or a change of `seen` from another thread (forget)
        self.released: str | None = None  # why NVML is let go (a reset): rounds read nothing meanwhile
        self.last_section: dict[str, Any] | None = None  # the last round that read NVML
        self.gpm: Any = None  # gpu/gpm.py's sampler, made where a GPU is read

    # --- the probe

    def __call__(self) -> dict[str, Any]:
        with self.lock:
            return self._round()

    def _round(self) -> dict[str, Any]:
        if self.released is not None:
            return self._unread()
        system = self._read()
        devices = system["devices"]
        missing = self._missing(devices)
        if missing:
            system["missing"] = missing
        problem = (
            system["reason"]
            if system["reason"] not in (None, REASON_NO_LIBRARY, REASON_NO_PYNVML, REASON_NO_GPU)
            else None
        )
        switches = self.health.xids.switches()
        if switches:
            system["nvswitches"] = switches
            for device in self.health.fabric_gpus(devices):
                self.health.add_switch_faults(device, switches)
        unplaced = self.health.xids.unplaced()
        if unplaced:
            system["unplaced_xids"] = unplaced
        notes = [*unplaced_notes(unplaced, self.health), *(self.notes(system) if self.notes else ())]
        system["health"] = node_health(devices, missing, problem, notes)
        self.last_section = system
        return system

    # --- NVML let go for a reset (nvmlInit attaches every GPU: a client holds them all)

    def release(self, why: str, wait_s: float = 2.0) -> str | None:
        """Shuts NVML down for this probe until `retake()`; rounds meanwhile judge the last read
        again. None when done; else why not (a round holds the probe in a call)."""
        if not self.lock.acquire(timeout=wait_s):
            return f"the GPU probe is in a round ({self.hung_call()})"
        try:
            self.released = why
            if self._initialized and self.nvml is not None:
                if self.gpm is not None:
                    self.gpm.retain(self.nvml, set())  # its samples are NVML's: freed before it goes
                try:
                    self.nvml.nvmlShutdown()
                except self.nvml.NVMLError:
                    pass
                self._initialized = False
        finally:
            self.lock.release()
        return None

    def retake(self) -> None:
        with self.lock:
            self.released = None

    def _unread(self) -> dict[str, Any]:
        """The section while NVML is let go: the last read, each GPU judged again with the Xids
        logged since (the kernel's lines go on), the release a node reason."""
        section = copy.deepcopy(self.last_section) if self.last_section else unavailable("NVML let go")
        devices = section.get("devices") or []
        for device in devices:
            device["health"] = self.health.stale(device.get("uuid"), device.get("health"), None)
        note = [(DEGRADED, f"NVML let go for {self.released}: GPUs read again after it")]
        section["health"] = node_health(devices, section.get("missing") or [], None, note)
        return section

    def read_one(self, uuid: str, wait_s: float = 30.0) -> dict[str, Any]:
        """A fresh full read of one GPU, as a round reads it (its NVML minor number added);
        {"state": "error", "error": ...} when NVML cannot read it, or a round holds the probe
        longer than `wait_s` (a hung call)."""
        if not self.lock.acquire(timeout=wait_s):
            return {"state": "error", "error": f"the GPU probe is in a round ({self.hung_call()})"}
        try:
            seen = self.seen.get(uuid)
            if seen is None:
                return {"state": "error", "error": f"no GPU {uuid} was ever seen here"}
            if self.nvml is None or self.released is not None:
                return {"state": "error", "index": seen["index"], "error": "NVML is let go"}
            reason = self._init(self.nvml)
            if reason:
                return {"state": "error", "index": seen["index"], "error": reason}
            device = self._device(seen["index"])
            if device.get("uuid") != uuid:
                return {**device, "state": "error", "error": device.get("error") or f"GPU {seen['index']} is another"}
            device["minor_number"] = self._optional_quiet(self.nvml.nvmlDeviceGetMinorNumber, device["index"])
            return device
        finally:
            self.lock.release()

    def _optional_quiet(self, fn: Callable[..., Any], index: int) -> Any:
        try:
            return self._optional(fn, self.nvml.nvmlDeviceGetHandleByIndex(index))
        except self.nvml.NVMLError:
            return None

    def call_age(self) -> float | None:
        """How long the NVML call in flight has run (Probe's per-call bound reads it)."""
        return self.nvml.call_age() if self.nvml is not None else None

    def uuid_of_bus(self, key: tuple[int, int, int]) -> str | None:
        """The GPU seen at that PCI address (gpu/kernel_xids.py's bus_key), if any."""
        for uuid, seen in list(self.seen.items()):
            if bus_key(seen.get("pci_bus_id")) == key:
                return uuid
        return None

    def forget(self, uuid: str, wait_s: float = 1.0) -> tuple[str, str]:
        """Acknowledges a GPU gone for good: no longer `missing`, its evidence dropped.
        (outcome, message): forgotten, unknown (never seen), present (NVML still counts it: refused)
        or busy (a round holds the probe, e.g. a hung NVML call)."""
        if not self.lock.acquire(timeout=wait_s):
            return "busy", f"the GPU probe is in a round ({self.hung_call()}): try again"
        try:
            seen = self.seen.get(uuid)
            if seen is None:
                return "unknown", f"no GPU {uuid} was ever seen here"
            if seen.get("present"):
                where = f"GPU {seen['index']} at {seen.get('pci_bus_id')}"
                return "present", f"{uuid} is present ({where}): only a GPU gone can be forgotten"
            self._drop(uuid)
            return "forgotten", f"{uuid} (last GPU {seen['index']} at {seen.get('pci_bus_id')}) forgotten"
        finally:
            self.lock.release()

    def _drop(self, uuid: str) -> None:
        self.seen.pop(uuid, None)
        self.users.pop(uuid, None)
        self.health.forget(uuid)

    def _missing(self, devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """GPUs seen in an earlier round (or run) that NVML no longer counts; one whose bus id
        now holds a GPU of another uuid was replaced (`replaced`), not lost."""
        now = self.clock()
        present = {d.get("uuid") for d in devices}
        # a GPU NVML still counts but cannot name (lost) is the one last seen at its index
        present |= {
            u for u, seen in self.seen.items() for d in devices if not d.get("uuid") and d["index"] == seen["index"]
        }
        for uuid, seen in self.seen.items():
            seen["present"] = uuid in present
        for device in devices:
            if device.get("uuid") and device["state"] == "ok":
                self.seen[device["uuid"]] = {
                    "index": device["index"],
                    "pci_bus_id": device.get("pci_bus_id"),
                    "at": seen_at(now),
                    "present": True,
                }
                self._note_users(device, now)
        buses = {bus_key(d.get("pci_bus_id")): d for d in devices if d.get("uuid") and d["state"] == "ok"}
        for uuid, seen in list(self.seen.items()):
            new = buses.get(bus_key(seen.get("pci_bus_id")))
            if not seen["present"] and new is not None and new["uuid"] != uuid:
                self.replaced.append(
                    {"old_uuid": uuid, "new_uuid": new["uuid"], "index": new["index"], "pci_bus_id": new["pci_bus_id"]}
                )
                self._drop(uuid)
        return [
            {
                "index": seen["index"],
                "uuid": uuid,
                "pci_bus_id": seen["pci_bus_id"],
                "health": self.health.missing(uuid, iso_time(seen.get("at"))),
            }
            for uuid, seen in sorted(self.seen.items(), key=lambda item: item[1]["index"])
            if not seen["present"]
        ]

    def _note_users(self, device: dict[str, Any], now: float) -> None:
        """The containers whose processes NVML lists on the GPU (the last USERS_KEPT, a day at most)."""
        users = self.users.setdefault(device["uuid"], {})
        for process in device.get("processes") or ():
            if process.get("container_id"):
                users[process["container_id"]] = round(now, 3)
        if len(users) > USERS_KEPT or any(now - at > USERS_KEEP_S for at in users.values()):
            newest = sorted(users.items(), key=lambda item: item[1])[-USERS_KEPT:]
            self.users[device["uuid"]] = {cid: at for cid, at in newest if now - at <= USERS_KEEP_S}

    def _read(self) -> dict[str, Any]:
        if self.nvml is None:
            nvml, reason = load_pynvml()
            if nvml is None:
                return unavailable(reason or "pynvml did not load")
            self.nvml = TracedNvml(nvml)
        nvml = self.nvml
        reason = self._init(nvml)
        if reason:
            return unavailable(reason)
        try:
            count = nvml.nvmlDeviceGetCount()
            system = {
                "available": count > 0,
                "reason": None if count else REASON_NO_GPU,
                "driver_version": nvml_text(nvml.nvmlSystemGetDriverVersion()),
                "cuda_driver_version": cuda_version(self._optional(nvml.nvmlSystemGetCudaDriverVersion)),
                "nvml_version": nvml_text(self._optional(nvml.nvmlSystemGetNVMLVersion)),
            }
        except nvml.NVMLError as exc:
            self._forget_on(exc)
            return unavailable(f"NVML error: {exc}")
        system["devices"] = [self._device(index) for index in range(count)]
        if self.gpm is not None:
            self.gpm.retain(nvml, {str(d.get("uuid")) for d in system["devices"]})
        return system

    def _init(self, nvml: Any) -> str | None:
        if self._initialized:
            return None
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            if exc.value == nvml.NVML_ERROR_LIBRARY_NOT_FOUND:
                return REASON_NO_LIBRARY
            if exc.value == nvml.NVML_ERROR_DRIVER_NOT_LOADED:
                return REASON_NO_DRIVER
            return f"NVML init failed: {exc}"
        self._initialized = True
        return None

    def _forget_on(self, exc: Any) -> None:
        if exc.value in (self.nvml.NVML_ERROR_UNINITIALIZED, self.nvml.NVML_ERROR_DRIVER_NOT_LOADED):
            self._initialized = False

    def _optional(self, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args), or None where the GPU or driver does not support it."""
        nvml = self.nvml
        try:
            return fn(*args)
        except nvml.NVMLError as exc:
            if exc.value in (
                nvml.NVML_ERROR_NOT_SUPPORTED,
                nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                nvml.NVML_ERROR_NO_PERMISSION,
            ):
                return None
            raise

    # --- one GPU

    def _device(self, index: int) -> dict[str, Any]:
        self._reading = index
        try:
            return self._read_device(index)
        finally:
            self._reading = None

    def _read_device(self, index: int) -> dict[str, Any]:
        nvml = self.nvml
        device: dict[str, Any] = {"index": index, "state": "ok"}
        handle = None
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            device["uuid"] = nvml_text(nvml.nvmlDeviceGetUUID(handle))
            device["name"] = nvml_text(nvml.nvmlDeviceGetName(handle))
            device["pci_bus_id"] = nvml_text(nvml.nvmlDeviceGetPciInfo(handle).busId)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            device["memory_total"] = memory.total
            capability = self._optional(nvml.nvmlDeviceGetCudaComputeCapability, handle)
            device["compute_capability"] = f"{capability[0]}.{capability[1]}" if capability else None
            limit = self._optional(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
            device["power_limit_w"] = round(limit / 1000, 1) if limit is not None else None
            device["mig"] = self._mig(handle)
            ecc = self._ecc(handle)
            device["ecc"] = ecc["facts"] if ecc else None
            device["processes"] = self._processes(handle)
            device["usage"] = self._usage(handle, memory, ecc)
            device["gpm"] = self._gpm().read(nvml, handle, device)
            temperature = device["usage"]["temperature_c"]
            device["health"] = self.health.read(nvml, handle, device["uuid"], self._optional, temperature)
        except nvml.NVMLError as exc:
            self._forget_on(exc)
            device["state"] = "error"
            device["error"] = str(exc)
            device.pop("usage", None)
            device.update(self._last_seen_at(index, device))
            every_call = handle is None or not self._answers_any(handle)
            device["health"] = self.health.failed(device.get("uuid"), exc, every_call)
        return device

    def _answers_any(self, handle: Any) -> bool:
        """Whether any of the GPU's identity calls still succeeds (after one of its calls failed)."""
        nvml = self.nvml
        for name in IDENTITY_CALLS:
            try:
                getattr(nvml, name)(handle)
                return True
            except nvml.NVMLError:
                continue
        return False

    def _last_seen_at(self, index: int, device: dict[str, Any]) -> dict[str, Any]:
        """A GPU NVML cannot name (lost): the uuid and bus id of the one last seen at its index."""
        if device.get("uuid"):
            return {}
        for uuid, seen in self.seen.items():
            if seen["index"] == index:
                return {"uuid": uuid, "pci_bus_id": seen["pci_bus_id"]}
        return {}

    # --- a read that did not come back

    def hung_call(self) -> str:
        """The NVML function a call of this probe is in (nvmlInit before any was named)."""
        return (self.nvml.calling if self.nvml is not None else None) or "nvmlInit"

    def hung_gpu(self) -> int | None:
        """The index of the GPU being read, if any."""
        return self._reading

    def hung(self, last: dict[str, Any] | None) -> dict[str, Any]:
        """The gpu section while a call of this probe hangs: the last good read, the GPU being
        read `failed` ("NVML call hung: <function>"; the node when no GPU was being read), the
        others judged again with the Xids logged since."""
        function = self.hung_call()
        section = copy.deepcopy(last) if last else unavailable(f"NVML call hung: {function}")
        reading = self._reading
        devices = section.get("devices") or []
        for device in devices:
            hung = function if device["index"] == reading else None
            device["health"] = self.health.stale(device.get("uuid"), device.get("health"), hung)
        # the node's own: no GPU being read, or one the last good read did not have
        on_node = reading is None or all(device["index"] != reading for device in devices)
        problem = f"NVML call hung: {function}" + (f" (GPU {reading})" if reading is not None else "")
        section["health"] = node_health(devices, section.get("missing") or [], problem if on_node else None)
        return section

    def _usage(self, handle: Any, memory: Any, ecc: dict[str, Any] | None) -> dict[str, Any]:
        nvml = self.nvml
        rates = self._optional(nvml.nvmlDeviceGetUtilizationRates, handle)
        power = self._optional(nvml.nvmlDeviceGetPowerUsage, handle)
        return {
            "memory_used": memory.used,
            "memory_free": memory.free,
            "utilization_gpu": rates.gpu if rates else None,
            "utilization_memory": rates.memory if rates else None,
            "temperature_c": self._optional(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU),
            "power_draw_w": round(power / 1000, 1) if power is not None else None,
            "ecc_corrected_volatile": ecc["corrected_volatile"] if ecc else None,
        }

    def _mig(self, handle: Any) -> dict[str, Any] | None:
        nvml = self.nvml
        modes = self._optional(nvml.nvmlDeviceGetMigMode, handle)
        if modes is None:
            return None
        current, pending = modes
        mig = {
            "enabled": current == nvml.NVML_DEVICE_MIG_ENABLE,
            "pending": pending == nvml.NVML_DEVICE_MIG_ENABLE,
            "devices": [],
        }
        if mig["enabled"]:
            for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
                try:
                    child = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
                except nvml.NVMLError as exc:
                    if exc.value == nvml.NVML_ERROR_NOT_FOUND:
                        continue  # an empty slot
                    raise
                instance_id = getattr(nvml, "nvmlDeviceGetGpuInstanceId", None)
                mig["devices"].append(
                    {
                        "slot": slot,
                        "uuid": nvml_text(nvml.nvmlDeviceGetUUID(child)),
                        "memory_total": nvml.nvmlDeviceGetMemoryInfo(child).total,
                        "gpu_instance_id": self._optional(instance_id, child) if instance_id else None,
                    }
                )
        return mig

    def _gpm(self) -> Any:
        """GPM's sampler (gpu/gpm.py), imported where a GPU is read, never on a machine without."""
        if self.gpm is None:
            from faden_agent.workers.inventory.gpu.gpm import GpmSampler

            self.gpm = GpmSampler()
        return self.gpm

    def _ecc(self, handle: Any) -> dict[str, Any] | None:
        nvml = self.nvml
        modes = self._optional(nvml.nvmlDeviceGetEccMode, handle)
        if modes is None:
            return None
        enabled = bool(modes[0])
        if not enabled:
            return {"facts": {"enabled": False}, "corrected_volatile": None}

        def count(kind: int, counter: int) -> int | None:
            return self._optional(nvml.nvmlDeviceGetTotalEccErrors, handle, kind, counter)

        return {
            "facts": {
                "enabled": True,
                "uncorrected_volatile": count(nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC),
                "uncorrected_aggregate": count(nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_AGGREGATE_ECC),
            },
            "corrected_volatile": count(nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_VOLATILE_ECC),
        }

    def _processes(self, handle: Any) -> list[dict[str, Any]]:
        nvml = self.nvml
        found: dict[int, dict[str, Any]] = {}
        for kind, fn in (
            ("compute", nvml.nvmlDeviceGetComputeRunningProcesses),
            ("graphics", nvml.nvmlDeviceGetGraphicsRunningProcesses),
        ):
            for proc in self._optional(fn, handle) or ():
                entry = found.setdefault(
                    proc.pid,
                    {
                        "pid": proc.pid,
                        "name": process_name(proc.pid),
                        "container_id": container_of_pid(proc.pid),
                        "types": [],
                    },
                )
                entry["types"].append(kind)
                used = getattr(proc, "usedGpuMemory", None)
                entry["usage"] = {"used_memory": used if isinstance(used, int) else None}
        for pid, sm in self._process_utilization(handle).items():
            if pid in found:
                found[pid]["usage"]["utilization_sm"] = sm
        return [found[pid] for pid in sorted(found)]

    def _process_utilization(self, handle: Any) -> dict[int, int]:
        """pid -> SM utilisation (%) of NVML's per-process samples; none where the GPU keeps
        none, or no process ran since (the driver answers NOT_FOUND then)."""
        nvml = self.nvml
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(handle, 0)
        except (nvml.NVMLError, AttributeError):
            return {}
        return {s.pid: s.smUtil for s in samples or () if isinstance(getattr(s, "smUtil", None), int)}


def unplaced_notes(unplaced: list[dict[str, Any]], health: HealthReader) -> list[tuple[str, str]]:
    """The node's reasons for the Xids of a bus id no GPU was seen at (NVML never listed it:
    e.g. a GPU that fell off the bus as the driver probed it) whose hold has not ended."""
    notes = []
    for bus in unplaced:
        for entry in bus["xid"]:
            xid = XIDS.get(entry["code"]) if entry["event"] == "xid" else None
            if xid is not None and xid.verdict != OK and health.holds.holds(None, entry):
                notes.append((xid.verdict, f"PCI {bus['pci_bus_id']} (no GPU seen there): {xid_reason(entry['code'])}"))
    return notes


def process_name(pid: int) -> str | None:
    """The process's command name (from /proc: this module needs nothing but pynvml, so
    bench/gpu_probe.py can run it on a bare GPU machine)."""
    try:
        with open(os.path.join("/proc", str(pid), "comm"), encoding="utf-8", errors="replace") as fh:
            return fh.read().strip() or None
    except OSError:
        return None  # gone, or in a PID namespace we cannot see


def iso_time(at: float | None) -> str:
    """1795991313.5 -> "2026-11-29T20:28:33Z" (unknown: "an earlier run")."""
    if at is None:
        return "an earlier run"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def cuda_version(raw: int | None) -> str | None:
    """NVML's CUDA driver version 12040 -> "12.4"."""
    return f"{raw // 1000}.{(raw % 1000) // 10}" if raw else None


def unavailable(reason: str) -> dict[str, Any]:
    return {
        "available": False,
        "reason": reason,
        "driver_version": None,
        "cuda_driver_version": None,
        "nvml_version": None,
        "devices": [],
    }
