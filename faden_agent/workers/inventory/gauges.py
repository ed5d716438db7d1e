"""The inventory's figures for the supervisor's /metrics, carried in its liveness status.

gauges() reduces the last collected sections and traffic sample to a few numbers per GPU,
watched path, peer and node condition; bounded (MAX_ITEMS each), labels only from bounded
sets. A figure not measured is left out, never None: the heartbeat's change key sees only non-numbers.
"""

from __future__ import annotations

from typing import Any

from faden_agent.protocol.metrics import GPU_VERDICTS

MAX_ITEMS = 64
GPU_FIGURES = ("memory_used", "memory_free", "utilization_gpu", "temperature_c", "power_draw_w")
GPU_NAMES = ("uuid", "pci_bus_id", "name")  # the info family's labels; uuid on every GPU series
MAX_XID_CODES = 64  # Xid codes counted per GPU (gpu_xids.MAX_CODES)


def _present(item: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in item.items() if value is not None}


def _verdict(health: Any) -> str | None:
    verdict = health.get("verdict") if isinstance(health, dict) else None
    return verdict if verdict in GPU_VERDICTS else None


def gpu_gauges(gpu: Any) -> dict[str, Any]:
    gpu = gpu if isinstance(gpu, dict) else {}
    devices = []
    for device in (gpu.get("devices") or [])[:MAX_ITEMS]:
        if not isinstance(device, dict) or not isinstance(device.get("index"), int):
            continue
        usage = device.get("usage") or {}
        entry = {"index": device["index"], "state": device.get("state"), "verdict": _verdict(device.get("health"))}
        entry["memory_total"] = device.get("memory_total")
        entry.update({name: str(device[name])[:128] for name in GPU_NAMES if isinstance(device.get(name), str)})
        entry.update({name: usage.get(name) for name in GPU_FIGURES})
        entry["errors"] = gpu_errors(device.get("health"))
        devices.append(_present(entry))
    node = {"available": bool(gpu.get("available")), "verdict": _verdict(gpu.get("health")), "devices": devices}
    return _present(node)


def gpu_errors(health: Any) -> dict[str, Any] | None:
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
    figures = {
        "xid": xids,
        "ecc": {
            "uncorrected_volatile": ecc.get("uncorrected_volatile"),
            "uncorrected_aggregate": ecc.get("uncorrected_aggregate"),
            "corrected_volatile": usage.get("ecc_corrected_volatile"),
            "corrected_aggregate": usage.get("ecc_corrected_aggregate"),
        },
        "retired_pages": {"single_bit": retired.get("single_bit"), "double_bit": retired.get("double_bit")},
        "remapped_rows": {
            "correctable": remapped.get("correctable"),
            "uncorrectable": remapped.get("uncorrectable"),
        },
        "nvlink": dict(nvlink),
        "pcie_replay": (health.get("pcie") or {}).get("replay"),
        "clock_events_s": dict(usage.get("clock_events_active_s") or {}),
    }
    kept = {key: _present(value) if isinstance(value, dict) else value for key, value in figures.items()}
    return {key: value for key, value in kept.items() if value not in (None, {})} or None


def disk_gauges(disks: Any) -> list[dict[str, Any]]:
    out = []
    for fs in disks if isinstance(disks, list) else []:
        if not isinstance(fs, dict):
            continue
        usage = fs.get("usage") or {}
        for path, role in zip(fs.get("paths") or [], fs.get("roles") or [], strict=False):
            out.append(
                _present({"path": str(path), "role": str(role), "free": usage.get("free"), "total": fs.get("total")})
            )
    return out[:MAX_ITEMS]


def peer_gauges(traffic: Any) -> list[dict[str, Any]]:
    peers = traffic.get("peers") if isinstance(traffic, dict) else None
    out = []
    for peer in (peers or [])[:MAX_ITEMS]:
        figures = {key: peer.get(key) for key in ("sent_bytes", "received_bytes", "rtt_ms")}
        out.append(_present({"peer": peer.get("node_id") or peer.get("address"), **figures}))
    return out


def container_gpu_gauges(docker: Any) -> list[dict[str, Any]]:
    """Per managed container and GPU: memory used and SM utilisation (gpu/containers.py)."""
    out = []
    containers = docker.get("containers") if isinstance(docker, dict) else None
    for container in containers if isinstance(containers, list) else []:
        for use in ((container.get("usage") or {}).get("gpus") or []) if isinstance(container, dict) else []:
            figures = {key: use.get(key) for key in ("index", "uuid", "used_memory", "utilization_sm")}
            out.append(_present({"container": str(container.get("name"))[:128], **figures}))
    return out[:MAX_ITEMS]


def condition_gauges(conditions: Any) -> dict[str, dict[str, int]]:
    """1 per active node condition, 0 per inactive one; an unknown one is left out."""
    out = {}
    for name, state in (conditions if isinstance(conditions, dict) else {}).items():
        if isinstance(state, dict) and state.get("active") in (True, False):
            out[str(name)] = {"active": int(state["active"])}
    return dict(list(out.items())[:MAX_ITEMS])


def gauges(sections: dict[str, Any] | None, traffic: dict[str, Any] | None) -> dict[str, Any]:
    sections = sections or {}
    return {
        "containers_gpu": container_gpu_gauges(sections.get("docker")),
        "gpu": gpu_gauges(sections.get("gpu")),
        "disks": disk_gauges(sections.get("disks")),
        "peers": peer_gauges(traffic),
        "conditions": condition_gauges(sections.get("conditions")),
    }
