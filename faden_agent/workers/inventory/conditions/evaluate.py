"""One round of node conditions: the rules over what this inventory round collected (the disks'
read-only flags, the topology's RDMA interfaces, the GPUs' persistence mode and fabric manager),
the traffic thread's last sample of the RDMA ports (no second reader of their counters), the
kernel lines' view (kernel.py), the data NICs' link state and the kernel's clock; read in the
collector's thread, at the inventory interval."""

from __future__ import annotations

import time
from typing import Any

from faden_agent.common.errorline import error_line
from faden_agent.config import Config
from faden_agent.protocol import conditions as names
from faden_agent.workers.inventory.conditions import rules
from faden_agent.workers.inventory.conditions.clock import ClockStatus, read_clock
from faden_agent.workers.inventory.conditions.kernel import KernelView
from faden_agent.workers.inventory.conditions.links import link_state
from faden_agent.workers.inventory.conditions.persistenced import daemon_running
from faden_agent.workers.inventory.conditions.tracker import NodeConditions, Signal

STALE_SAMPLES = 3  # a port sample older than this many traffic intervals is no reading


def signals(
    config: Config,
    sections: dict[str, Any],
    ports_sample: dict[str, Any] | None,
    conditions: NodeConditions,
    now: float | None = None,
    kernel: KernelView | None = None,
) -> dict[str, Signal]:
    """Every applicable condition's signal this round. `ports_sample`: the traffic record's
    last sample ({"collected_at", "infiniband": [...] or None}; None: none taken yet);
    `kernel`: what the kernel's lines said (None: they are not read here)."""
    now = time.time() if now is None else now
    found: dict[str, Signal] = {
        names.FILESYSTEM_READ_ONLY: rules.filesystem_read_only(
            sections.get("disks"), conditions.memory(names.FILESYSTEM_READ_ONLY)
        ),
        names.CLOCK_UNSYNCHRONISED: rules.clock(clock_reading(config), config.clock_max_error_sec),
    }
    found.update(infiniband(config, sections.get("gpu"), ports_sample, conditions, now))
    states, listed = data_nics(config, sections.get("topology"))
    links = rules.network_links(states, listed, conditions.memory(names.NETWORK_LINK_DOWN))
    if links is not None:
        found[names.NETWORK_LINK_DOWN] = links
    daemon = rules.persistence_daemon(sections.get("gpu"), daemon_running)
    if daemon is not None:
        found[names.PERSISTENCE_DAEMON_STOPPED] = daemon
    fabric = rules.fabric_manager(sections.get("gpu"))
    if fabric is not None:
        found[names.FABRIC_MANAGER_DOWN] = fabric
    if kernel is not None:
        found.update(rules.kernel_lines(kernel, kernel_holds(config), conditions.memory("kernel"), now))
    return found


def kernel_holds(config: Config) -> dict[str, float | None]:
    """Each kernel condition's hold (seconds; None: until the next boot), from its setting."""
    return {
        names.KERNEL_HUNG_TASK: config.kernel_hung_task_hold_sec,
        names.KERNEL_LOCKUP: config.kernel_lockup_hold_sec,
        names.HARDWARE_ERROR_UNCORRECTED: config.hardware_error_uncorrected_hold_sec,
        names.HARDWARE_ERROR_CORRECTED: config.hardware_error_corrected_hold_sec,
        names.OOM_KILL: config.oom_kill_hold_sec,
    }


def clock_reading(config: Config) -> ClockStatus | str:
    try:
        return read_clock(config.clock_status_file)
    except (OSError, ValueError) as exc:
        return error_line(exc)


def infiniband(
    config: Config, gpu: Any, sample: dict[str, Any] | None, conditions: NodeConditions, now: float
) -> dict[str, Signal]:
    ports = (sample or {}).get("infiniband")
    if not ports:
        return {}  # no sample yet, or no RDMA device: nothing to say
    assert sample is not None
    age = now - float(sample.get("collected_at") or 0)
    if age > STALE_SAMPLES * config.traffic_interval_sec:
        limit = STALE_SAMPLES * config.traffic_interval_sec
        stuck = Signal(None, f"the RDMA ports' reads are stuck: no sample for over {limit:g} s")
        return dict.fromkeys(
            (names.INFINIBAND_PORT_DOWN, names.INFINIBAND_RATE_LOW, names.INFINIBAND_ERRORS_RISING), stuck
        )
    limits = rules.ib_limits(config.ib_min_ports, config.ib_min_rate_gbps, gpu, config.ib_rising_sec)
    return rules.infiniband(ports, limits, conditions.memory("infiniband"), now)


def data_nics(config: Config, topology: Any) -> tuple[dict[str, str], bool]:
    """(each data NIC's link state, whether DATA_NICS named them)."""
    listed = bool(config.data_nics)
    if listed:
        wanted = list(config.data_nics)
    else:
        devices = (topology or {}).get("rdma") or [] if isinstance(topology, dict) else []
        wanted = sorted({n for d in devices if isinstance(d, dict) for n in d.get("netdevs") or []})
    return {name: link_state(config.sysfs_root, name) for name in wanted}, listed
