"""Node conditions as both sides spell them (docs/inventory.md, "Node conditions"): the names,
the event a change of one makes, and the wire shapes of the inventory's `conditions` section.
A condition is active (true), inactive (false) or unknown (null: its source cannot be read)."""

from __future__ import annotations

from typing import TypedDict

FILESYSTEM_READ_ONLY = "filesystem_read_only"
INFINIBAND_PORT_DOWN = "infiniband_port_down"
INFINIBAND_RATE_LOW = "infiniband_rate_low"
INFINIBAND_ERRORS_RISING = "infiniband_errors_rising"
NETWORK_LINK_DOWN = "network_link_down"
CLOCK_UNSYNCHRONISED = "clock_unsynchronised"
PERSISTENCE_DAEMON_STOPPED = "persistence_daemon_stopped"
FABRIC_MANAGER_DOWN = "fabric_manager_down"
KERNEL_HUNG_TASK = "kernel_hung_task"
KERNEL_LOCKUP = "kernel_lockup"
HARDWARE_ERROR_UNCORRECTED = "hardware_error_uncorrected"
HARDWARE_ERROR_CORRECTED = "hardware_error_corrected"
OOM_KILL = "oom_kill"
KERNEL_CONDITIONS = (KERNEL_HUNG_TASK, KERNEL_LOCKUP, HARDWARE_ERROR_UNCORRECTED, HARDWARE_ERROR_CORRECTED, OOM_KILL)
NODE_CONDITIONS = (
    FILESYSTEM_READ_ONLY,
    INFINIBAND_PORT_DOWN,
    INFINIBAND_RATE_LOW,
    INFINIBAND_ERRORS_RISING,
    NETWORK_LINK_DOWN,
    CLOCK_UNSYNCHRONISED,
    PERSISTENCE_DAEMON_STOPPED,
    FABRIC_MANAGER_DOWN,
    *KERNEL_CONDITIONS,
)
CONDITION_CHANGED = "node.condition_changed"


class ConditionState(TypedDict):
    """One condition in the inventory's `conditions` section (by name)."""

    active: bool | None
    reason: str | None  # one line; None while inactive
    since: float  # when `active` took its value (Unix time)


class ConditionChanged(TypedDict):
    """The event record's data when a condition's `active` changes."""

    type: str  # CONDITION_CHANGED
    condition: str
    active: bool | None
    old: bool | None  # None: unknown before, or first seen
    reason: str | None
    since: float  # when it took the new value


def event_record_id(event: ConditionChanged) -> str:
    return f"ev:cond:{event['condition']}:{int(event['since'] * 1000)}"
