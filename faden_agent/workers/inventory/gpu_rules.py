"""The GPU verdict table: which signal makes a GPU `degraded` or `failed`, and the reason.

RULES is the contract (docs/inventory.md shows `markdown_table()` verbatim); `verdict`
applies it to one GPU's facts (gpu_health.py derives them). Worst verdict wins; reasons
keep the table's order. The agent only reports: the backend decides what a verdict means.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

OK = "ok"
DEGRADED = "degraded"
FAILED = "failed"
RANK = {OK: 0, DEGRADED: 1, FAILED: 2}

# Xid codes with a verdict of their own (NVIDIA's Xid catalogue); any other Xid is kept
# in the GPU's history but changes nothing: most are an application's fault.
XID_FAILED = {
    48: "double-bit ECC error",
    64: "row remapping failure",
    79: "GPU has fallen off the bus",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}
XID_DEGRADED = {
    63: "row remapping pending",
    74: "NVLink error",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
}
RECOVERY_FAILED = ("gpu_reset", "node_reboot", "drain_and_reset", "bus_reset", "system_reboot")
THROTTLE_SLOWDOWNS = ("hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake_slowdown")


@dataclass(frozen=True)
class Rule:
    name: str
    verdict: str
    when: str  # the signal, as the docs say it
    reasons: Callable[[dict[str, Any]], list[str]]  # facts -> reason lines ([]: rule not met)
    example: str


def _xids(table: dict[int, str]) -> Callable[[dict[str, Any]], list[str]]:
    def reasons(facts: dict[str, Any]) -> list[str]:
        codes = sorted({code for code in facts.get("recent_xids", ()) if code in table})
        return [f"Xid {code}: {table[code]}" for code in codes]

    return reasons


def _xid_list(table: dict[int, str]) -> str:
    codes = ", ".join(f"{code} ({meaning})" for code, meaning in table.items())
    return f"an Xid event within GPU_XID_HOLD_SEC: {codes}"


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
        "missing",
        FAILED,
        "a GPU seen earlier is no longer in NVML's device count",
        _flag("missing", "GPU missing from NVML's device count"),
        "GPU missing from NVML's device count",
    ),
    Rule(
        "xid_fatal",
        FAILED,
        _xid_list(XID_FAILED),
        _xids(XID_FAILED),
        "Xid 79: GPU has fallen off the bus",
    ),
    Rule(
        "remap_failure",
        FAILED,
        "remapped rows: failure",
        _flag("remap_failure", "row remapping failed"),
        "row remapping failed",
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
        "xid_degrading",
        DEGRADED,
        _xid_list(XID_DEGRADED),
        _xids(XID_DEGRADED),
        "Xid 74: NVLink error",
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
        "throttled",
        DEGRADED,
        "clock event " + ", ".join(THROTTLE_SLOWDOWNS) + " active longer than GPU_THROTTLE_SEC",
        _listed("throttled", "{} active over the throttle limit"),
        "hw_thermal_slowdown active over the throttle limit",
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
        "an NVLink link seen active earlier is down",
        _listed("nvlink_down", "NVLink {} down"),
        "NVLink 3 down",
    ),
    Rule(
        "pcie_replays",
        DEGRADED,
        "the PCIe replay count rose within GPU_RISING_SEC",
        _flag("pcie_rising", "PCIe replays rising"),
        "PCIe replays rising",
    ),
    Rule("pcie_width", DEGRADED, "PCIe link narrower than its maximum width", _pcie_width, "PCIe link x8 of x16"),
    Rule(
        "fabric_pending",
        DEGRADED,
        "fabric state not_started or in_progress",
        _fabric_pending,
        "fabric not ready: in_progress",
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


def markdown_table() -> str:
    """The table as docs/inventory.md shows it."""
    lines = ["| rule | signal | verdict | reason (example) |", "| --- | --- | --- | --- |"]
    lines += [f"| `{r.name}` | {r.when} | `{r.verdict}` | `{r.example}` |" for r in RULES]
    return "\n".join(lines)
