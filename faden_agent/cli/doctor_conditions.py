"""doctor's node conditions: one line per condition (docs/inventory.md, "Node conditions"), read
now with the inventory's own rules and the running agent's memories (ports and links seen up,
counter baselines, the kernel lines that hold), under a timeout; a condition the running agent
holds from what it saw over time (a counter that rose, the fabric manager) shows as it says."""

from __future__ import annotations

import time
from typing import Any

from faden_agent.config import Config
from faden_agent.disk.disklow import low_threshold
from faden_agent.ipc import control
from faden_agent.node.topology import topology
from faden_agent.protocol import conditions as names
from faden_agent.workers.inventory.conditions import evaluate
from faden_agent.workers.inventory.conditions.kernel import KernelView, restored
from faden_agent.workers.inventory.conditions.store import ConditionStore
from faden_agent.workers.inventory.conditions.tracker import NodeConditions, Signal
from faden_agent.workers.inventory.disks import probe_disks
from faden_agent.workers.inventory.gpu.holds import read_boot_id
from faden_agent.workers.inventory.probes import OK, Probe
from faden_agent.workers.inventory.traffic.infiniband import read_ports

HINTS = {
    names.FILESYSTEM_READ_ONLY: "the kernel remounts a file system read-only after I/O errors: check `dmesg`,"
    " repair it and mount it read-write; the agent cannot keep its outbox there meanwhile",
    names.INFINIBAND_PORT_DOWN: "check the cable and the switch port (`ibstat`); IB_MIN_PORTS sets the count",
    names.INFINIBAND_RATE_LOW: "the link trained below its rate: reseat or replace the cable (`ibstat`)",
    names.INFINIBAND_ERRORS_RISING: "a flaky link: check the cable and the switch port (`perfquery`)",
    names.NETWORK_LINK_DOWN: "check the cable and the switch port (`ip link`); DATA_NICS names the interfaces",
    names.CLOCK_UNSYNCHRONISED: "start a time service (chrony, systemd-timesyncd); `timedatectl` shows when the"
    " clock is synchronised: log and event times are wrong until then",
    names.PERSISTENCE_DAEMON_STOPPED: "start it: `systemctl start nvidia-persistenced`",
    names.FABRIC_MANAGER_DOWN: "start it: `systemctl start nvidia-fabricmanager` (its version must be the"
    " driver's); without it the GPUs' NVLink fabric does not come up",
    names.KERNEL_HUNG_TASK: "a task stuck in uninterruptible sleep (storage, NFS, a driver): `dmesg` shows its"
    " stack; a reboot ends it (KERNEL_HUNG_TASK_HOLD_SEC)",
    names.KERNEL_LOCKUP: "a CPU stuck in the kernel: `dmesg` shows where; repeated ones point at a driver or"
    " the hardware",
    names.HARDWARE_ERROR_UNCORRECTED: "the hardware could not correct an error: `ras-mc-ctl --errors` or"
    " `mcelog` names the part; replace it, then reboot",
    names.HARDWARE_ERROR_CORRECTED: "corrected errors foretell a failing part: `ras-mc-ctl --error-count`"
    " counts them per DIMM",
    names.OOM_KILL: "the machine ran out of memory and the kernel killed a process (the reason names it):"
    " give the containers memory limits",
}
FAILING = (names.FILESYSTEM_READ_ONLY,)  # the agent itself cannot work: fail, not warn


def condition_lines(config: Config, docker_root: str | None, timeout_s: float) -> list[tuple[str, str, str, str]]:
    """(name, status, detail, hint) per condition that applies here."""
    read = Probe("conditions", lambda: _read(config, docker_root), timeout_s)
    read.start()
    result = read.wait()
    if result.status != OK:
        return [("conditions", "warn", f"reading the machine failed: {result.error}", "see the agent's log")]
    sections, ports = result.data
    store = ConditionStore(config.state_dir, read_only=True)
    conditions = NodeConditions(store)
    now = time.time()
    kernel = None  # the kernel lines' conditions as the agent kept them, where it reads them
    if isinstance(store.memory.get("kernel"), dict):
        boot = read_boot_id(config.boot_id_file)
        kernel = KernelView(restored(store.memory["kernel"], boot), boot, None)
    found = evaluate.signals(config, sections, {"collected_at": now, "infiniband": ports}, conditions, now, kernel)
    held = _running_agent(config)
    for name, reason in held.items():
        if name in names.NODE_CONDITIONS and not (found.get(name) or Signal(False)).active:
            found[name] = Signal(True, f"{reason} (the running agent)")
    return [_line(name, found[name]) for name in names.NODE_CONDITIONS if name in found]


def _read(config: Config, docker_root: str | None) -> tuple[dict[str, Any], Any]:
    disks = probe_disks(
        config.state_dir, config.disk_paths, docker_root, lambda total: low_threshold(total, config), None
    )
    return {"disks": disks, "topology": topology(config.sysfs_root)}, read_ports(config.sysfs_root)


def _running_agent(config: Config) -> dict[str, str]:
    table = control.ps(config.runtime_dir) or {}
    for worker in table.get("workers", []):
        if isinstance(worker, dict) and worker.get("name") == "inventory":
            held = (worker.get("status") or {}).get("conditions")
            return {str(k): str(v) for k, v in held.items()} if isinstance(held, dict) else {}
    return {}


def _line(name: str, signal: Signal) -> tuple[str, str, str, str]:
    if signal.active is False:
        return (name, "ok", "no", "")
    status = "fail" if signal.active and name in FAILING else "warn"
    detail = signal.reason or ("unknown" if signal.active is None else "yes")
    return (name, status, detail, HINTS.get(name, "see docs/inventory.md, Node conditions"))
