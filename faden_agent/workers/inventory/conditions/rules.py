"""The rule of each node condition (docs/inventory.md, "Node conditions"): what the inventory
read this round, and the rule's memory across rounds and restarts -> a Signal. A rule that does
not apply to this machine (no RDMA device, no GPU) reports nothing. Reasons name the culprit
and hold no figure that moves by itself, so a held condition's record does not change every round."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

from faden_agent.protocol import conditions as names
from faden_agent.workers.inventory.conditions.clock import ClockStatus
from faden_agent.workers.inventory.conditions.kernel import KernelView, holding
from faden_agent.workers.inventory.conditions.tracker import Signal

MAX_REMEMBERED = 64  # ports, links and paths a rule remembers
# gpud's expected InfiniBand ports and rate by GPU model (at_least_ports, at_least_rate Gb/s),
# after NVIDIA's DGX user guides: applied by `auto` on a machine of AUTO_MIN_GPUS or more GPUs.
GPUD_IB_TABLE = {"a100": (1, 200.0), "h100": (8, 400.0), "h200": (8, 400.0), "b200": (8, 400.0), "gb200": (8, 400.0)}
AUTO_MIN_GPUS = 8
# Counters whose rise is an error (traffic/infiniband.py's names): a link that went down, and the
# physical layer's errors (IBTA's PortCounters).
IB_ERROR_COUNTERS = (
    "link_downed",
    "symbol_errors",
    "rx_errors",
    "link_error_recovery",
    "link_integrity_errors",
    "buffer_overrun_errors",
)
READ_ONLY_ROLES = ("state", "docker")  # the agent and Docker write there: read-only at any time is a fault
REMOUNTED_ROLES = ("configured",)  # DISK_PATHS: a fault once seen writable (a share meant read-only is not)
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*Gb/sec")


class IbLimits(NamedTuple):
    min_ports: int  # InfiniBand ports that must be active (0: no count)
    min_rate_gbps: float  # an active InfiniBand port's least rate (0: none)
    rising_s: float


def ib_limits(min_ports: int | None, min_rate: float | None, gpu: Any, rising_s: float) -> IbLimits:
    """The settings, `auto` (None) filled from gpud's table by the GPUs' model."""
    devices = [d for d in (gpu or {}).get("devices") or [] if isinstance(d, dict)]
    model = str(devices[0].get("name") or "").lower() if devices else ""
    matches = [key for key in GPUD_IB_TABLE if key in model]
    auto = GPUD_IB_TABLE[max(matches, key=len)] if matches and len(devices) >= AUTO_MIN_GPUS else (0, 0.0)
    return IbLimits(auto[0] if min_ports is None else min_ports, auto[1] if min_rate is None else min_rate, rising_s)


def filesystem_read_only(disks: Any, memory: dict[str, Any]) -> Signal:
    if not isinstance(disks, list):
        return Signal(None, "the file systems were not read yet")
    writable: list[str] = memory.setdefault("writable", [])
    culprits = []
    for disk in disks:
        if not isinstance(disk, dict) or "read_only" not in disk:
            continue
        for path, role in zip(disk.get("paths") or [], disk.get("roles") or [], strict=False):
            if not disk["read_only"]:
                if role in REMOUNTED_ROLES and path not in writable:
                    writable.append(path)
            elif role in READ_ONLY_ROLES or (role in REMOUNTED_ROLES and path in writable):
                culprits.append(f"{path} ({role}) on {disk.get('mountpoint')}")
    del writable[:-MAX_REMEMBERED]
    if culprits:
        return Signal(True, "read-only: " + "; ".join(culprits))
    return Signal(False)


def _port_name(port: dict[str, Any]) -> str:
    return f"{port.get('device')} port {port.get('port')}"


def _is_up(port: dict[str, Any]) -> bool:
    return port.get("state") == "ACTIVE" and port.get("phys_state") in (None, "LinkUp")


def rate_gbps(rate: Any) -> float | None:
    """`400 Gb/sec (4X NDR)` -> 400.0."""
    found = _RATE.match(rate) if isinstance(rate, str) else None
    return float(found.group(1)) if found else None


def infiniband(ports: list[dict[str, Any]], limits: IbLimits, memory: dict[str, Any], now: float) -> dict[str, Signal]:
    """The three InfiniBand/RoCE conditions from one sample of the ports (traffic/infiniband.py)."""
    seen_up: list[str] = memory.setdefault("up", [])
    down, slow, ib_up = [], [], 0
    for port in ports:
        name = _port_name(port)
        if _is_up(port):
            if name not in seen_up:
                seen_up.append(name)
            if port.get("link_layer") == "InfiniBand":
                ib_up += 1
                rate = rate_gbps(port.get("rate"))
                if limits.min_rate_gbps and rate is not None and rate < limits.min_rate_gbps:
                    slow.append(f"{name} at {rate:g} Gb/s")
        elif name in seen_up:
            down.append(f"{name} {str(port.get('state')).lower()} ({port.get('phys_state')})")
    del seen_up[:-MAX_REMEMBERED]
    reasons = list(down)
    ib_ports = sum(1 for port in ports if port.get("link_layer") == "InfiniBand")
    if limits.min_ports and ib_ports and ib_up < limits.min_ports:
        reasons.append(f"{ib_up} InfiniBand ports active, {limits.min_ports} expected")
    return {
        names.INFINIBAND_PORT_DOWN: Signal(bool(reasons), "; ".join(reasons) or None),
        names.INFINIBAND_RATE_LOW: Signal(
            bool(slow), f"{'; '.join(slow)}, below {limits.min_rate_gbps:g} Gb/s" if slow else None
        ),
        names.INFINIBAND_ERRORS_RISING: _errors_rising(ports, limits.rising_s, memory, now),
    }


def _errors_rising(ports: list[dict[str, Any]], hold_s: float, memory: dict[str, Any], now: float) -> Signal:
    """A counter above its value of the last round (kept across restarts) rose; a rise holds
    the condition for `hold_s`. A counter that went down (reset, wrapped) is a new baseline."""
    baselines: dict[str, dict[str, int]] = memory.setdefault("counters", {})
    rose: dict[str, float] = memory.setdefault("rose", {})
    for port in ports:
        counters = port.get("counters")
        if not isinstance(counters, dict):
            continue
        name = _port_name(port)
        before = baselines.get(name, {})
        for counter in IB_ERROR_COUNTERS:
            value = counters.get(counter)
            if isinstance(value, int) and isinstance(before.get(counter), int) and value > before[counter]:
                rose[f"{name}: {counter}"] = now
        baselines[name] = {c: counters[c] for c in IB_ERROR_COUNTERS if isinstance(counters.get(c), int)}
    for key in [k for k, at in rose.items() if now - at > hold_s]:
        del rose[key]
    for key in list(baselines)[:-MAX_REMEMBERED]:
        del baselines[key]
    if rose:
        return Signal(True, "rose: " + "; ".join(sorted(rose)))
    return Signal(False)


def network_links(states: dict[str, str], listed: bool, memory: dict[str, Any]) -> Signal | None:
    """`states`: each data NIC's link state (links.py). Listed NICs (DATA_NICS) must be up;
    the RDMA devices' interfaces, once seen up. None: no data NIC to watch."""
    seen_up: list[str] = memory.setdefault("up", [])
    culprits = []
    for name, state in sorted(states.items()):
        if state == "up":
            if name not in seen_up:
                seen_up.append(name)
        elif listed or name in seen_up:
            culprits.append(f"{name} {state}")
    del seen_up[:-MAX_REMEMBERED]
    if not listed and not seen_up:
        return None
    return Signal(bool(culprits), ("link not up: " + ", ".join(culprits)) if culprits else None)


def clock(status: ClockStatus | str, max_error_s: float) -> Signal:
    """timedatectl's `System clock synchronized`: the kernel's maximum error below the bound
    (STA_UNSYNC alone may be set to keep the kernel off the RTC); `status`: a reading or why none."""
    if isinstance(status, str):
        return Signal(None, f"cannot read the clock's status: {status}")
    if status.maxerror_us < max_error_s * 1_000_000:
        return Signal(False)
    flag = "; STA_UNSYNC set" if status.unsync_flag else ""
    return Signal(True, f"the kernel's clock is not synchronised: maximum error {max_error_s:g} s or more{flag}")


def persistence_daemon(gpu: Any, running: Callable[[], bool]) -> Signal | None:
    """The daemon must run where a GPU has persistence mode off (the driver would unload
    between users: slow starts, lost state); None on a machine without GPUs."""
    devices = [d for d in (gpu or {}).get("devices") or [] if isinstance(d, dict)]
    if not devices:
        return None
    off = [str(d.get("index")) for d in devices if (d.get("health") or {}).get("persistence_mode") is False]
    if not off or running():
        return Signal(False)
    return Signal(True, f"nvidia-persistenced is not running and persistence mode is off on GPU {', '.join(off)}")


def fabric_manager(gpu: Any) -> Signal | None:
    """The fabric manager must run where the GPUs are on an NVSwitch fabric: the GPU section's
    `fabric_manager` (gpu/node_notes.py, there only then); None elsewhere."""
    manager = (gpu or {}).get("fabric_manager") if isinstance(gpu, dict) else None
    if not isinstance(manager, dict):
        return None
    state = f"nvidia-fabricmanager: {manager.get('state')}"
    if manager.get("active") is None:
        return Signal(None, f"fabric manager state unknown: {manager.get('state')}")
    return Signal(not manager["active"], None if manager["active"] else f"not running ({state})")


def kernel_lines(
    view: KernelView, holds: dict[str, float | None], memory: dict[str, Any], now: float
) -> dict[str, Signal]:
    """Each kernel condition from its last line (kernel.py) and its hold; unknown while no kernel
    line can be read and none holds it. The lines that still hold go to `memory` (kept)."""
    found: dict[str, Signal] = {}
    memory.clear()
    for name in names.KERNEL_CONDITIONS:
        entry = view.seen.get(name)
        if entry is not None and holding(holds.get(name), entry, view.boot_id, now):
            memory[name] = entry
            found[name] = Signal(True, entry["reason"])
        elif view.problem:
            found[name] = Signal(None, f"{view.problem}: the kernel's lines not seen")
        else:
            found[name] = Signal(False)
    return found
