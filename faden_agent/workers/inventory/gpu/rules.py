"""The GPU verdict table: which signal makes a GPU `degraded` or `failed`, and the reason.

RULES is the contract (docs/inventory.md shows `markdown_table()` verbatim); `verdict`
applies it to one GPU's facts (gpu/health.py derives them). Worst verdict wins; reasons
keep the table's order. The agent only reports: the backend decides what a verdict means.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from faden_agent.node.xid_catalogue import (
    CLOCK,
    DEGRADED,
    FAILED,
    HISTORY,
    HOLD_ENDS,
    OK,
    REBOOT,
    RESET,
    XIDS,
    Xid,
)

RANK = {OK: 0, DEGRADED: 1, FAILED: 2}
__all__ = ["CLOCK", "DEGRADED", "FAILED", "HISTORY", "OK", "REBOOT", "RESET", "RULES", "XIDS", "Xid", "verdict"]

XID_FAILED = {code: x.meaning for code, x in XIDS.items() if x.verdict == FAILED}
XID_DEGRADED = {code: x.meaning for code, x in XIDS.items() if x.verdict == DEGRADED}
RECOVERY_FAILED = ("gpu_reset", "node_reboot", "drain_and_reset", "bus_reset", "system_reboot")
THROTTLE_SLOWDOWNS = ("hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown")
RETIRED_PAGES_LIMIT = 64  # the most pages NVIDIA's driver retires on one GPU: none are left after
PCIE_REPLAYS_PER_MINUTE = 8  # DCGM's PCIe health watch: more replays than this in a minute


class Rule(NamedTuple):
    name: str
    verdict: str
    when: str  # the signal, as the docs say it
    reasons: Callable[[dict[str, Any]], list[str]]  # facts -> reason lines ([]: rule not met)
    example: str


def _xids(table: dict[int, str]) -> Callable[[dict[str, Any]], list[str]]:
    def reasons(facts: dict[str, Any]) -> list[str]:
        codes = sorted({code for code in facts.get("recent_xids", ()) if code in table})
        return [xid_reason(code) for code in codes]

    return reasons


def xid_reason(code: int) -> str:
    xid = XIDS[code]
    return f"Xid {code}: {xid.meaning} ({xid.action})"


def _xid_list(table: dict[int, str]) -> str:
    codes = ", ".join(str(code) for code in table)
    return f"an Xid whose hold has not ended (the Xid table below: its remedy, or the clock): {codes}"


def _flag(key: str, text: str) -> Callable[[dict[str, Any]], list[str]]:
    return lambda facts: [text] if facts.get(key) else []


def _listed(key: str, template: str) -> Callable[[dict[str, Any]], list[str]]:
    return lambda facts: [template.format(item) for item in facts.get(key) or ()]


def _recovery(wanted: tuple[str, ...] | None) -> Callable[[dict[str, Any]], list[str]]:
    def reasons(facts: dict[str, Any]) -> list[str]:
        action = facts.get("recovery_action")
        if action in (None, "none") or (wanted is not None and action not in wanted):
            return []
        if wanted is None and action in RECOVERY_FAILED:
            return []
        return [f"driver asks for recovery: {action}"]

    return reasons


def _fabric_failed(facts: dict[str, Any]) -> list[str]:
    fabric = facts.get("fabric") or {}
    return [f"fabric registration failed: {fabric['status']}"] if fabric.get("status") else []


def _fabric_pending(facts: dict[str, Any]) -> list[str]:
    fabric = facts.get("fabric") or {}
    state = fabric.get("state")
    return [f"fabric not ready: {state}"] if state in ("not_started", "in_progress") else []


def _temperature(checks: tuple[tuple[str, str, str], ...]) -> Callable[[dict[str, Any]], list[str]]:
    """(sensor, threshold, its name) pairs: a reading at or over the threshold NVML gives for it."""

    def reasons(facts: dict[str, Any]) -> list[str]:
        readings = facts.get("temperature") or {}
        found = []
        for sensor, threshold, name in checks:
            reading, limit = readings.get(sensor), readings.get(threshold)
            above = readings.get("shutdown") if threshold == "slowdown" else None  # said by the shutdown rule
            if isinstance(above, int) and isinstance(reading, int) and 0 < above <= reading:
                continue
            if isinstance(reading, int) and isinstance(limit, int) and 0 < limit <= reading:
                what = "GPU" if sensor == "gpu" else sensor
                found.append(f"{what} temperature {reading} C: at or over its {name} {limit} C")
        return found

    return reasons


def _pcie_width(facts: dict[str, Any]) -> list[str]:
    pcie = facts.get("pcie") or {}
    width, widest = pcie.get("width"), pcie.get("width_max")
    return [f"PCIe link x{width} of x{widest}"] if width and widest and width < widest else []


RULES: tuple[Rule, ...] = (
    Rule(
        "lost",
        FAILED,
        "NVML says the GPU is lost, gone or needs a reset",
        lambda facts: [facts["lost"]] if facts.get("lost") else [],
        "GPU is lost",
    ),
    Rule(
        "hung",
        FAILED,
        "an NVML call on this GPU (or, when NVML cannot tell, on the node) has not returned "
        "within INVENTORY_PROBE_TIMEOUT_SEC",
        lambda facts: [f"NVML call hung: {facts['hung']}"] if facts.get("hung") else [],
        "NVML call hung: nvmlDeviceGetFieldValues",
    ),
    Rule(
        "unanswering",
        FAILED,
        "every NVML call on this GPU fails, not as lost (NVML's `Unknown Error` is what a GPU fallen off the bus often "
        'answers: nvidia-smi\'s "Unable to determine the device handle")',
        lambda facts: [f"NVML: {facts['unanswering']} on every call"] if facts.get("unanswering") else [],
        "NVML: Unknown Error on every call",
    ),
    Rule(
        "missing",
        FAILED,
        "a GPU seen earlier (in this run or, from gpu-evidence.json, an earlier one) is no "
        "longer in NVML's device count; the time it was last seen",
        lambda facts: [f"GPU missing since {facts['missing']}"] if facts.get("missing") else [],
        "GPU missing since 2026-12-03T04:00:00Z",
    ),
    Rule(
        "xid_fatal",
        FAILED,
        _xid_list(XID_FAILED),
        _xids(XID_FAILED),
        "Xid 79: GPU has fallen off the bus (reboot needed)",
    ),
    Rule(
        "sxid_fatal",
        FAILED,
        "a fatal SXid of an NVSwitch (kernel log) while this GPU is on the NVSwitch fabric, until this GPU is reset or "
        "the machine reboots",
        _listed("sxid_fatal", "{}"),
        "NVSwitch 0000:c1:00: SXid 20034 (fatal): fabric reset needed",
    ),
    Rule(
        "temperature_shutdown",
        FAILED,
        "GPU temperature at or over the shutdown threshold NVML gives for it",
        _temperature((("gpu", "shutdown", "shutdown"),)),
        "GPU temperature 92 C: at or over its shutdown 92 C",
    ),
    Rule(
        "remap_failure",
        FAILED,
        "remapped rows: failure",
        _flag("remap_failure", "row remapping failed"),
        "row remapping failed",
    ),
    Rule(
        "retired_limit",
        FAILED,
        f"retired pages (single- and double-bit) at or over {RETIRED_PAGES_LIMIT}, the driver's limit",
        lambda facts: (
            [f"{facts['retired_total']} retired pages: at the driver's limit"]
            if (facts.get("retired_total") or 0) >= RETIRED_PAGES_LIMIT
            else []
        ),
        "64 retired pages: at the driver's limit",
    ),
    Rule(
        "recovery_reset",
        FAILED,
        "NVML's recovery action: " + ", ".join(RECOVERY_FAILED),
        _recovery(RECOVERY_FAILED),
        "driver asks for recovery: gpu_reset",
    ),
    Rule(
        "fabric_failed",
        FAILED,
        "fabric state completed with an error status",
        _fabric_failed,
        "fabric registration failed: Unknown Error",
    ),
    Rule(
        "check_failed",
        FAILED,
        "DCGM's diagnostic (`gpu.check`, or the check after `gpu.reset`) failed a test on this GPU while it ran no "
        "work, until a later check passes, the GPU is reset or the machine reboots",
        _listed("check_failed", "{}"),
        "DCGM diagnostic level 2 failed: memory: Found 1 faulty memory elements on GPU 0",
    ),
    Rule(
        "xid_degrading",
        DEGRADED,
        _xid_list(XID_DEGRADED),
        _xids(XID_DEGRADED),
        "Xid 94: contained ECC error (reset needed, when convenient)",
    ),
    Rule(
        "temperature_slowdown",
        DEGRADED,
        "GPU temperature at or over the slowdown threshold NVML gives, or memory temperature at its maximum",
        _temperature((("gpu", "slowdown", "slowdown"), ("memory", "memory_max", "maximum"))),
        "GPU temperature 88 C: at or over its slowdown 87 C",
    ),
    Rule(
        "remap_pending",
        DEGRADED,
        "remapped rows: pending",
        _flag("remap_pending", "row remap pending: reset needed"),
        "row remap pending: reset needed",
    ),
    Rule(
        "retired_pending",
        DEGRADED,
        "retired pages: pending",
        _flag("retired_pending", "page retirement pending: reset needed"),
        "page retirement pending: reset needed",
    ),
    Rule(
        "recovery_drain",
        DEGRADED,
        "NVML's recovery action: any other (drain_p2p, ...)",
        _recovery(None),
        "driver asks for recovery: drain_p2p",
    ),
    Rule(
        "remap_none_left",
        DEGRADED,
        "the row remapper's bank histogram has banks with no spare row left",
        lambda facts: (
            [f"row remapping: {facts['remap_none_left']} banks with no spare row left"]
            if facts.get("remap_none_left")
            else []
        ),
        "row remapping: 2 banks with no spare row left",
    ),
    Rule(
        "throttled",
        DEGRADED,
        "clock event " + ", ".join(THROTTLE_SLOWDOWNS) + " active longer than GPU_THROTTLE_SEC",
        _listed("throttled", "{} active over the throttle limit"),
        "hw_thermal_slowdown active over the throttle limit",
    ),
    Rule(
        "power_brake",
        DEGRADED,
        "clock event hw_power_brake_slowdown active (any length: the board's power brake is asserted)",
        _flag("power_brake", "power brake slowdown active"),
        "power brake slowdown active",
    ),
    Rule(
        "uncorrected_aggregate",
        DEGRADED,
        "any uncorrected ECC error in the aggregate (lifetime) count",
        lambda facts: (
            [f"{facts['uncorrected_aggregate']} uncorrected ECC errors on record"]
            if facts.get("uncorrected_aggregate")
            else []
        ),
        "3 uncorrected ECC errors on record",
    ),
    Rule(
        "uncorrected_ecc",
        DEGRADED,
        "volatile uncorrected ECC count rose within GPU_RISING_SEC",
        _flag("uncorrected_rising", "uncorrected ECC errors rising"),
        "uncorrected ECC errors rising",
    ),
    Rule(
        "nvlink_errors",
        DEGRADED,
        "an NVLink CRC flit, CRC data, replay or recovery count rose within GPU_RISING_SEC",
        _listed("nvlink_rising", "NVLink {} errors rising"),
        "NVLink crc_flit errors rising",
    ),
    Rule(
        "nvlink_down",
        DEGRADED,
        "an NVLink link seen active earlier (kept across restarts) is down, or at the first read a "
        "link is down while others of the GPU are active",
        _listed("nvlink_down", "NVLink {} down"),
        "NVLink 3 down",
    ),
    Rule(
        "pcie_replays",
        DEGRADED,
        f"more than {PCIE_REPLAYS_PER_MINUTE} PCIe replays within a minute (DCGM's rate), seen within GPU_RISING_SEC",
        _flag("pcie_rising", f"PCIe replays over {PCIE_REPLAYS_PER_MINUTE} a minute"),
        f"PCIe replays over {PCIE_REPLAYS_PER_MINUTE} a minute",
    ),
    Rule(
        "check_warned",
        DEGRADED,
        "DCGM's diagnostic warned on this GPU while it ran no work (as `check_failed` ends)",
        _listed("check_warned", "{}"),
        "DCGM diagnostic level 2 warned: pcie: GPU 0 host-side PCIe replay violation",
    ),
    Rule("pcie_width", DEGRADED, "PCIe link narrower than its maximum width", _pcie_width, "PCIe link x8 of x16"),
    Rule(
        "fabric_pending",
        DEGRADED,
        "fabric state not_started or in_progress",
        _fabric_pending,
        "fabric not ready: in_progress",
    ),
    Rule("ecc_off", DEGRADED, "ECC mode off", _flag("ecc_off", "ECC mode off"), "ECC mode off"),
    Rule(
        "persistence_off",
        DEGRADED,
        "persistence mode off (the driver unloads between users: slow starts, lost state)",
        _flag("persistence_off", "persistence mode off"),
        "persistence mode off",
    ),
    Rule(
        "mig_pending",
        DEGRADED,
        "a MIG mode change waits for a GPU reset",
        _flag("mig_pending", "MIG mode change pending: reset needed"),
        "MIG mode change pending: reset needed",
    ),
    Rule(
        "nvml_error",
        DEGRADED,
        "another NVML error on this GPU",
        _listed("nvml_errors", "NVML error: {}"),
        "NVML error: Unknown Error",
    ),
)


def verdict(facts: dict[str, Any]) -> tuple[str, list[str]]:
    """(the worst verdict of the rules met, their reasons in table order)."""
    worst, reasons = OK, []
    for rule in RULES:
        found = rule.reasons(facts)
        if found:
            reasons.extend(found)
            if RANK[rule.verdict] > RANK[worst]:
                worst = rule.verdict
    return worst, reasons


def worst(verdicts: list[str]) -> str:
    return max(verdicts, key=RANK.__getitem__, default=OK)


def xid_markdown_table() -> str:
    """The Xid table as docs/inventory.md shows it."""
    lines = [
        "| Xid | meaning | NVIDIA's immediate action | verdict | action | the hold ends on | a death after it |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {c} | {x.meaning} | `{x.nvidia}` | `{x.verdict}` | {x.action} | {HOLD_ENDS[x.hold]} | {_death(x)} |"
        for c, x in XIDS.items()
    ]
    return "\n".join(lines)


def _death(xid: Xid) -> str:
    return "`hardware`" if xid.gpu_fault else "`application` (listed)" if xid.application else "not counted"


def markdown_table() -> str:
    """The table as docs/inventory.md shows it."""
    lines = ["| rule | signal | verdict | reason (example) |", "| --- | --- | --- | --- |"]
    lines += [f"| `{r.name}` | {r.when} | `{r.verdict}` | `{r.example}` |" for r in RULES]
    return "\n".join(lines)
