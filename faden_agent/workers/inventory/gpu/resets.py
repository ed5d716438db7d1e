"""gpu.reset on the inventory's side: refuses what blocks a reset (processes on the GPU, NVLink
or NVSwitch peers that must be reset with it), turns persistence mode off for it, lets NVML go,
runs `nvidia-smi --gpu-reset -i BUS`, takes NVML again, waits until it reads the GPU, checks it
(level 1); a reset done and a check passed end its reset-class holds (docs/commands.md).
Persistence mode and NVML are always given back, also when the reset fails.
"""

from __future__ import annotations

import os
import time
from typing import Any

from faden_agent.common import programs
from faden_agent.workers.inventory.gpu import smi
from faden_agent.workers.inventory.gpu.checks import FAIL, CheckEnded, check_gpus
from faden_agent.workers.inventory.gpu.node_notes import on_fabric
from faden_agent.workers.inventory.gpu.remedy import Job, Tools

RESET_BOUND_S = 120.0  # nvidia-smi's reset; NVIDIA's takes seconds, a hung GPU forever
PERSISTENCE_BOUND_S = 30.0
NVML_BACK_S = 60.0  # until NVML reads the GPU again after the reset
BACK_POLL_S = 0.5
CHECK_RESERVE_S = 20.0  # of the time limit, kept for the read and the check after the reset
MAX_HOLDER_FDS = 50_000  # /proc/*/fd entries looked at for the GPU's device file
NEXT = {
    smi.IN_USE: "stop what holds the GPU (monitoring programs, nv-hostengine, nvidia-persistenced: `fuser -v"
    " /dev/nvidia*` names them), or reboot",
    smi.PRIMARY: "the display's GPU cannot be reset while the machine runs: reboot",
    smi.NOT_SUPPORTED: "this GPU cannot be reset alone: reboot",
    smi.NO_PERMISSION: "the agent must run as root to reset a GPU; else reboot",
    smi.LOST: "reboot (a power cycle when a reboot does not bring it back)",
    smi.HUNG: "reboot",
    smi.FAILED: "reboot",
}


def run_reset(tools: Tools, job: Job, uuid: str, command_id: str) -> None:
    device = tools.devices().get(uuid)
    if device is None:
        job.finish(False, "not_found", f"no GPU {uuid} in the last read of this machine's GPUs")
        return
    index, bus = device["index"], device.get("pci_bus_id") or ""
    fresh = tools.probe.read_one(uuid)
    blocked = fabric_block(device, tools.section() or {}, tools.fabric_manager)
    if blocked:
        job.finish(False, "reset_blocked", f"GPU {index} ({bus}): {blocked}")
        return
    users = processes_on(fresh if fresh.get("state") == "ok" else device)
    if users:
        job.finish(False, "gpu_in_use", f"GPU {index} ({bus}) runs processes: {users}; nothing was reset")
        return
    persistence = ((fresh.get("health") or device.get("health") or {}).get("persistence_mode")) is True
    if persistence:
        tools.remember_persistence(bus)  # turned on again at the next start if this worker dies meanwhile
        ran = programs.run(smi.persistence_command(tools.nvidia_smi, bus, False), PERSISTENCE_BOUND_S, job.stop)
        if not ran.ok:
            tools.remember_persistence(None)
            job.finish(
                False, "reset_blocked", f"GPU {index}: persistence mode is on and did not turn off: {smi.said(ran)}"
            )
            return
        job.step("persistence_off", index=index, said=ran.words(200))
    try:
        reset = _reset(tools, job, index, bus)
    finally:
        if persistence:
            back = programs.run(smi.persistence_command(tools.nvidia_smi, bus, True), PERSISTENCE_BOUND_S)
            tools.remember_persistence(None)
            job.step("persistence_on", index=index, ok=back.ok, said=smi.said(back)[:200])
    if reset is None:
        return  # ended with its reason already
    ran = reset
    reset_at = time.time()
    cause = smi.reset_cause(ran)
    if cause is not None:
        holders = device_holders(fresh.get("minor_number"), tools.proc_root) if cause == smi.IN_USE else ""
        held = f"; holding /dev/nvidia{fresh.get('minor_number')}: {holders}" if holders else ""
        failure = {"cause": cause, "said": smi.said(ran), "next": NEXT[cause]}
        job.finish(
            False,
            "reset_failed",
            f"GPU {index} ({bus}) not reset ({cause}): {smi.said(ran)}{held}; next: {NEXT[cause]}",
            failure,
        )
        return
    job.step("reset_done", index=index, said=ran.words(200), elapsed_s=ran.elapsed_s)
    after = _wait_back(tools, job, uuid)
    if after is None:
        job.finish(
            False,
            "reset_failed",
            f"GPU {index} ({bus}) was reset but NVML did not read it again within {NVML_BACK_S:g} s; next: reboot",
            {"cause": "not_back", "said": smi.said(ran), "next": "reboot"},
        )
        return
    job.step("nvml_reads_again", index=index, after_s=after)
    try:
        report = check_gpus(tools, job, [uuid], 1, {})
    except CheckEnded as ended:
        job.finish(False, ended.reason, f"GPU {index} was reset; its level-1 check did not judge: {ended.message}")
        return
    checked = report["gpus"][uuid]
    result: dict[str, Any] = {
        "uuid": uuid,
        "index": index,
        "pci_bus_id": bus,
        "said": ran.words(300),
        "persistence_restored": persistence,
        "check": report,
    }
    if checked["outcome"] == FAIL:
        job.finish(
            False,
            "check_failed",
            f"GPU {index} was reset, but its level-1 check failed: {', '.join(checked['failed'])}; next: reboot",
            result,
        )
        return
    sign = f"reset by the agent (gpu.reset {command_id}), level-1 check {checked['outcome']}"
    tools.probe.health.holds.reset_seen(uuid, sign, at=reset_at)
    tools.on_change()
    checked_by = f"level-1 check ({report['tool']}): {checked['outcome']}"
    job.finish(True, "ok", f"GPU {index} ({bus}) reset; NVML read it again after {after:.1f} s; {checked_by}", result)


def _reset(tools: Tools, job: Job, index: int, bus: str) -> programs.Ran | None:
    """Lets NVML go (every client holds every GPU), resets, takes NVML again; None when it
    could not let go (the job ended)."""
    why = f"a reset of GPU {index}"
    try:
        problem = tools.probe.release(why)
        if problem is None and not tools.watcher.release():
            problem = "the GPU event watch did not let NVML go within 5 s"
        if problem is not None:
            job.finish(False, "reset_blocked", f"GPU {index}: the agent could not let NVML go: {problem}")
            return None
        job.step("nvml_let_go", index=index)
        job.step("resetting", index=index, pci_bus_id=bus)
        bound = min(RESET_BOUND_S, max(1.0, job.left_s() - CHECK_RESERVE_S))
        return programs.run(smi.reset_command(tools.nvidia_smi, bus), bound, job.stop, tools.remember_group)
    finally:
        tools.probe.retake()
        tools.watcher.retake()
        tools.on_change()


def _wait_back(tools: Tools, job: Job, uuid: str) -> float | None:
    """Seconds until NVML read the GPU (same uuid) again; None when it did not within NVML_BACK_S."""
    started = time.monotonic()
    until = started + min(NVML_BACK_S, max(1.0, job.left_s()))
    while not job.stop.is_set():
        if tools.probe.read_one(uuid).get("state") == "ok":
            return round(time.monotonic() - started, 2)
        if time.monotonic() >= until:
            return None
        job.stop.wait(BACK_POLL_S)
    return None


def fabric_block(device: dict[str, Any], section: dict[str, Any], fabric_manager: Any) -> str | None:
    """Why this GPU cannot be reset alone (NVIDIA's nvidia-smi manual, -r), or None: GPUs before
    Ampere with NVLink peers are reset together; on an Ampere NVSwitch system one is reset alone
    only while the fabric manager runs; from Hopper on each alone."""
    capability = str(device.get("compute_capability") or "")
    major = int(capability.split(".")[0]) if capability.split(".")[0].isdigit() else None
    if major is None or major >= 9:
        return None
    links = ((device.get("health") or {}).get("nvlink") or {}).get("links") or []
    if major < 8 and any(link.get("active") for link in links):
        return (
            "a GPU before Ampere with NVLink peers must be reset in one command with them: drain the machine and "
            "reset every GPU (nvidia-smi -r), or reboot"
        )
    if major == 8 and on_fabric(section):
        manager = fabric_manager(section.get("driver_version"))
        if manager.active is not True:
            return (
                "on an Ampere NVSwitch system a GPU is reset alone only while the fabric manager runs"
                f" ({manager.state}): start nvidia-fabricmanager, or drain the machine and reset every GPU, or reboot"
            )
    return None


def processes_on(device: dict[str, Any]) -> str:
    """The processes NVML lists on the GPU, named ('' when none)."""
    named = []
    for process in device.get("processes") or ():
        owner = f"container {process['container_id'][:12]}" if process.get("container_id") else "outside any container"
        named.append(f"pid {process.get('pid')} ({process.get('name') or '?'}, {owner})")
    return ", ".join(named[:16])


def device_holders(minor: Any, proc_root: str = "/proc") -> str:
    """The processes with /dev/nvidia<minor> open (as `fuser` finds them), named; '' when none."""
    if type(minor) is not int:
        return ""
    target = f"/dev/nvidia{minor}"
    found: list[str] = []
    looked = 0
    try:
        pids = [name for name in os.listdir(proc_root) if name.isdigit()]
    except OSError:
        return ""
    for pid in pids:
        fds = os.path.join(proc_root, pid, "fd")
        try:
            names = os.listdir(fds)
        except OSError:
            continue
        for fd in names:
            looked += 1
            if looked > MAX_HOLDER_FDS:
                return ", ".join(found + ["(more not looked at)"])
            try:
                if os.readlink(os.path.join(fds, fd)) != target:
                    continue
            except OSError:
                continue
            own = " (this agent)" if int(pid) == os.getpid() else ""
            found.append(f"pid {pid} ({_comm(proc_root, pid)}){own}")
            break
    return ", ".join(found[:16])


def _comm(proc_root: str, pid: str) -> str:
    try:
        with open(os.path.join(proc_root, pid, "comm"), encoding="utf-8", errors="replace") as fh:
            return fh.read(64).strip() or "?"
    except OSError:
        return "?"
