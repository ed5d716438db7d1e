"""doctor's GPU section: one line per GPU (its verdict and reasons, model, UUID and bus id,
persistence mode, the fabric manager's state where the GPU has NVSwitches) and one with
the driver, NVML and CUDA versions; read once through the inventory's own GPU probe, with
the agent's GPU evidence (Xids, GPUs seen), under a timeout: a hung NVML call is named."""

from __future__ import annotations

from typing import Any

from faden_agent.config import Config
from faden_agent.workers.inventory.gpu import evidence as gpu_evidence
from faden_agent.workers.inventory.gpu.health import HealthReader
from faden_agent.workers.inventory.gpu.probe import GpuProbe
from faden_agent.workers.inventory.gpu.xids import XidLog
from faden_agent.workers.inventory.probes import OK, OVERRUN, Probe

STATUS_OF = {"ok": "ok", "degraded": "warn", "failed": "fail"}
ACTIONS = ("reboot needed", "reset needed", "drain")


def gpu_lines(config: Config, timeout_s: float) -> list[tuple[str, str, str, str]]:
    """(name, status, detail, hint) per line; none without NVML or GPUs (the nvml check says so)."""
    reader = HealthReader(XidLog(hold_s=config.gpu_xid_hold_sec), xid_hold_s=config.gpu_xid_hold_sec)
    probe = GpuProbe(health=reader)
    evidence = gpu_evidence.Evidence(config.state_dir, read_only=True)
    gpu_evidence.restore(evidence, probe, {})
    call = Probe("gpu", probe, timeout_s)
    call.start()
    result = call.wait()
    if result.status == OVERRUN:
        index = probe.hung_gpu()
        where = f" on GPU {index}" if index is not None else ""
        detail = f"NVML call hung{where}: {probe.hung_call()} (no answer in {timeout_s:g} s)"
        return [("gpus", "fail", detail, "the driver stopped answering: check `dmesg` for Xid lines")]
    if result.status != OK:
        return [("gpus", "fail", f"GPU read failed: {result.error}", "check the driver (nvidia-smi)")]
    section = result.data
    if not section.get("devices") and not section.get("missing"):
        return []
    lines = [("gpu driver", "ok", versions(section), "")]
    for device in [*section["devices"], *section.get("missing", [])]:
        lines.append(device_line(device))
    return lines


def versions(section: dict[str, Any]) -> str:
    return (
        f"driver {section.get('driver_version')}, NVML {section.get('nvml_version')}, "
        f"CUDA {section.get('cuda_driver_version')}"
    )


def device_line(device: dict[str, Any]) -> tuple[str, str, str, str]:
    health = device.get("health") or {}
    verdict = health.get("verdict", "ok")
    who = " ".join(str(device[k]) for k in ("name", "uuid", "pci_bus_id") if device.get(k))
    facts = []
    if health.get("persistence_mode") is not None:
        facts.append(f"persistence {'on' if health['persistence_mode'] else 'off'}")
    fabric = health.get("fabric")
    if fabric:
        facts.append(f"fabric manager {fabric['state']}" + (f" ({fabric['status']})" if fabric.get("status") else ""))
    detail = f"{who}: {verdict}"
    if health.get("reasons"):
        detail += f" ({'; '.join(health['reasons'])})"
    if facts:
        detail += f"; {', '.join(facts)}"
    reasons = " ".join(health.get("reasons") or ())
    action = next((a for a in ACTIONS if a in reasons), None)
    hint = f"{action} (docs/inventory.md, the verdict table)" if action else "see docs/inventory.md, the verdict table"
    return (f"gpu {device.get('index')}", STATUS_OF.get(verdict, "fail"), detail, hint)
