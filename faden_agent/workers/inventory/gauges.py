"""The inventory's figures for the supervisor's /metrics, carried in its liveness status.

gauges() reduces the last collected sections and traffic sample to a few numbers per GPU,
watched path, peer and node condition; bounded (MAX_ITEMS each), labels only from bounded
sets. A figure not measured is left out, never None: the heartbeat's change key sees only non-numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from faden_agent.protocol.metrics import GPU_VERDICTS

if TYPE_CHECKING:
    from faden_agent.protocol.status import (
        ConditionGauge,
        ContainerGpuGauges,
        DiskGauges,
        GpuDeviceGauges,
        GpuErrors,
        GpuGauges,
        GpuMigGauges,
        MachineGauges,
        PeerGauges,
    )

MAX_ITEMS = 64
MAX_XID_CODES = 64  # Xid codes counted per GPU (gpu/xids.py's MAX_CODES)
ACTIVITY = ("sm_active", "sm_occupancy", "tensor_active", "dram_active")  # GPM's (gpu/gpm.py), percent


Gauges = TypeVar("Gauges", bound=Mapping[str, object])


def _get(item: Any, key: str) -> Any:
    """A collected figure, unchecked: None when absent."""
    return item.get(key) if isinstance(item, dict) else None


def _present(item: Gauges) -> Gauges:
    """The item without the figures not measured (None)."""
    return cast(Gauges, {key: value for key, value in item.items() if value is not None})


def _verdict(health: Any) -> str | None:
    verdict = health.get("verdict") if isinstance(health, dict) else None
    return verdict if verdict in GPU_VERDICTS else None


def _name(value: Any) -> str | None:
    return value[:128] if isinstance(value, str) else None


def gpu_gauges(gpu: Any) -> GpuGauges:
    gpu = gpu if isinstance(gpu, dict) else {}
    devices: list[GpuDeviceGauges] = []
    for device in (gpu.get("devices") or [])[:MAX_ITEMS]:
        if not isinstance(device, dict) or not isinstance(device.get("index"), int):
            continue
        usage = device.get("usage") or {}
        entry: GpuDeviceGauges = {"index": device["index"], "state": _get(device, "state")}
        if (verdict := _verdict(device.get("health"))) is not None:
            entry["verdict"] = verdict
        entry["memory_total"] = _get(device, "memory_total")
        if (uuid := _name(device.get("uuid"))) is not None:
            entry["uuid"] = uuid
        if (bus_id := _name(device.get("pci_bus_id"))) is not None:
            entry["pci_bus_id"] = bus_id
        if (name := _name(device.get("name"))) is not None:
            entry["name"] = name
        entry.update(
            {
                "memory_used": _get(usage, "memory_used"),
                "memory_free": _get(usage, "memory_free"),
                "utilization_gpu": _get(usage, "utilization_gpu"),
                "temperature_c": _get(usage, "temperature_c"),
                "power_draw_w": _get(usage, "power_draw_w"),
                "sm_active": _get(usage, "sm_active"),
                "sm_occupancy": _get(usage, "sm_occupancy"),
                "tensor_active": _get(usage, "tensor_active"),
                "dram_active": _get(usage, "dram_active"),
            }
        )
        if (errors := gpu_errors(device.get("health"))) is not None:
            entry["errors"] = errors
        devices.append(_present(entry))
    node: GpuGauges = {"available": bool(gpu.get("available"))}
    if (verdict := _verdict(gpu.get("health"))) is not None:
        node["verdict"] = verdict
    node["devices"] = devices
    if mig := mig_gauges(gpu.get("devices")):
        node["mig"] = mig
    return node


def mig_gauges(devices: Any) -> list[GpuMigGauges]:
    """Per MIG GPU instance its GPM figures, with its GPU's index and UUID."""
    out: list[GpuMigGauges] = []
    for device in devices if isinstance(devices, list) else []:
        instances = ((device.get("mig") or {}).get("devices") or []) if isinstance(device, dict) else []
        for instance in instances if isinstance(instances, list) else []:
            usage = _get(instance, "usage") or {}
            figures = {name: _get(usage, name) for name in ACTIVITY}
            if any(value is not None for value in figures.values()):
                labels = {
                    "index": device.get("index"),
                    "uuid": _name(device.get("uuid")),
                    "mig_uuid": _name(instance.get("uuid")),
                    "gpu_instance": _get(instance, "gpu_instance_id"),
                }
                out.append(cast("GpuMigGauges", _present({**labels, **figures})))
    return out[:MAX_ITEMS]


def gpu_errors(health: Any) -> GpuErrors | None:
    """The GPU's error counters for /metrics: Xids by code (in its log), ECC, retired pages,
    remapped rows, NVLink and PCIe errors, and seconds each clock event has been active."""
    if not isinstance(health, dict):
        return None
    usage = health.get("usage") or {}
    totals = usage.get("xid_totals")
    xids = dict(list(totals.items())[:MAX_XID_CODES]) if isinstance(totals, dict) else {}
    ecc = health.get("ecc_errors") or {}
    retired = health.get("retired_pages") or {}
    remapped = health.get("remapped_rows") or {}
    nvlink = (health.get("nvlink") or {}).get("errors") or {}
    figures: GpuErrors = {
        "xid": _present(xids),
        "ecc": _present(
            {
                "uncorrected_volatile": _get(ecc, "uncorrected_volatile"),
                "uncorrected_aggregate": _get(ecc, "uncorrected_aggregate"),
                "corrected_volatile": _get(usage, "ecc_corrected_volatile"),
                "corrected_aggregate": _get(usage, "ecc_corrected_aggregate"),
            }
        ),
        "retired_pages": _present(
            {"single_bit": _get(retired, "single_bit"), "double_bit": _get(retired, "double_bit")}
        ),
        "remapped_rows": _present(
            {"correctable": _get(remapped, "correctable"), "uncorrectable": _get(remapped, "uncorrectable")}
        ),
        "nvlink": _present(dict(nvlink)),
        "pcie_replay": _get(health.get("pcie"), "replay"),
        "clock_events_s": _present(dict(_get(usage, "clock_events_active_s") or {})),
    }
    kept = cast("GpuErrors", {key: value for key, value in figures.items() if value not in (None, {})})
    return kept or None


def disk_gauges(disks: Any) -> list[DiskGauges]:
    out: list[DiskGauges] = []
    for fs in disks if isinstance(disks, list) else []:
        if not isinstance(fs, dict):
            continue
        usage = fs.get("usage") or {}
        for path, role in zip(fs.get("paths") or [], fs.get("roles") or [], strict=False):
            disk: DiskGauges = {
                "path": str(path),
                "role": str(role),
                "free": _get(usage, "free"),
                "total": _get(fs, "total"),
            }
            out.append(_present(disk))
    return out[:MAX_ITEMS]


def peer_gauges(traffic: Any) -> list[PeerGauges]:
    peers = traffic.get("peers") if isinstance(traffic, dict) else None
    out: list[PeerGauges] = []
    for peer in (peers or [])[:MAX_ITEMS]:
        figures: PeerGauges = {
            "peer": _get(peer, "node_id") or _get(peer, "address"),
            "sent_bytes": _get(peer, "sent_bytes"),
            "received_bytes": _get(peer, "received_bytes"),
            "rtt_ms": _get(peer, "rtt_ms"),
        }
        out.append(_present(figures))
    return out


def container_gpu_gauges(docker: Any) -> list[ContainerGpuGauges]:
    """Per managed container and GPU: memory used and SM utilisation (gpu/containers.py)."""
    out: list[ContainerGpuGauges] = []
    containers = docker.get("containers") if isinstance(docker, dict) else None
    for container in containers if isinstance(containers, list) else []:
        for use in ((container.get("usage") or {}).get("gpus") or []) if isinstance(container, dict) else []:
            figures: ContainerGpuGauges = {
                "container": str(container.get("name"))[:128],
                "index": _get(use, "index"),
                "uuid": _get(use, "uuid"),
                "used_memory": _get(use, "used_memory"),
                "utilization_sm": _get(use, "utilization_sm"),
            }
            out.append(_present(figures))
    return out[:MAX_ITEMS]


def condition_gauges(conditions: Any) -> dict[str, ConditionGauge]:
    """1 per active node condition, 0 per inactive one; an unknown one is left out."""
    out: dict[str, ConditionGauge] = {}
    for name, state in (conditions if isinstance(conditions, dict) else {}).items():
        if isinstance(state, dict) and state.get("active") in (True, False):
            out[str(name)] = {"active": int(state["active"])}
    return dict(list(out.items())[:MAX_ITEMS])


def gauges(sections: dict[str, Any] | None, traffic: dict[str, Any] | None) -> MachineGauges:
    sections = sections or {}
    return {
        "containers_gpu": container_gpu_gauges(sections.get("docker")),
        "gpu": gpu_gauges(sections.get("gpu")),
        "disks": disk_gauges(sections.get("disks")),
        "peers": peer_gauges(traffic),
        "conditions": condition_gauges(sections.get("conditions")),
    }
