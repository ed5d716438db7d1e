"""doctor's GPU section: one line per GPU (its verdict and reasons, model, UUID and bus id,
persistence mode, fabric state), one with the driver, NVML and CUDA versions, one for the
kernel log the Xid lines come from (or why none can be read), one for the fabric manager on
NVSwitch machines; read once through the inventory's own GPU probe and its node reasons, with
the agent's GPU evidence, under a timeout: a hung NVML call is named."""

from __future__ import annotations

from typing import Any

from faden_agent.config import Config
from faden_agent.workers.inventory.gpu import evidence as gpu_evidence
from faden_agent.workers.inventory.gpu.health import HealthReader
from faden_agent.workers.inventory.gpu.holds import Holds, read_boot_id
from faden_agent.workers.inventory.gpu.node_notes import NodeNotes
from faden_agent.workers.inventory.gpu.probe import GpuProbe
from faden_agent.workers.inventory.gpu.xids import XidLog
from faden_agent.workers.inventory.kernel.lines import JOURNALD, kernel_source
from faden_agent.workers.inventory.probes import OK, OVERRUN, Probe

STATUS_OF = {"ok": "ok", "degraded": "warn", "failed": "fail"}
ACTIONS = ("reboot needed", "reset needed", "drain")


def gpu_lines(config: Config, timeout_s: float) -> list[tuple[str, str, str, str]]:
    """(name, status, detail, hint) per line; none without NVML or GPUs (the nvml check says so)."""
    holds = Holds(config.gpu_xid_hold_sec, read_boot_id(config.boot_id_file))
    reader = HealthReader(XidLog(holds=holds))
    probe = GpuProbe(health=reader, notes=NodeNotes(config.systemctl, 0.0))
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
    lines = [("gpu driver", "ok", versions(section), ""), kernel_line(config)]
    for device in [*section["devices"], *section.get("missing", [])]:
        lines.append(device_line(device))
    manager = section.get("fabric_manager")
    if manager:
        problem = next((r for r in section["health"]["reasons"] if r.startswith("fabric manager")), None)
        detail = problem or f"{manager['state']}, version {manager['version']} (the driver's)"
        hint = "systemctl start nvidia-fabricmanager (at the driver's version)" if problem else ""
        status = "ok" if problem is None else "fail" if manager["active"] is not None else "warn"
        lines.append(("fabric manager", status, detail, hint))
    return lines


def kernel_line(config: Config) -> tuple[str, str, str, str]:
    """Where the inventory reads the kernel's Xid lines from, or why it cannot."""
    source, why = kernel_source(config.journal_directory, config.kmsg_path)
    if source == JOURNALD:
        return ("kernel log", "ok", "Xid lines from the journal (journald)", "")
    if source is not None:
        return ("kernel log", "ok", f"Xid lines from {config.kmsg_path} ({why})", "")
    hint = "run the agent as root, or give it the host's journal or /dev/kmsg"
    return ("kernel log", "warn", f"{why}: GPU faults of the kernel log not seen", hint)


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
        facts.append(f"fabric {fabric['state']}" + (f" ({fabric['status']})" if fabric.get("status") else ""))
    detail = f"{who}: {verdict}"
    if health.get("reasons"):
        detail += f" ({'; '.join(health['reasons'])})"
    if facts:
        detail += f"; {', '.join(facts)}"
    reasons = " ".join(health.get("reasons") or ())
    action = next((a for a in ACTIONS if a in reasons), None)
    hint = f"{action} (docs/inventory.md, the verdict table)" if action else "see docs/inventory.md, the verdict table"
    return (f"gpu {device.get('index')}", STATUS_OF.get(verdict, "fail"), detail, hint)
