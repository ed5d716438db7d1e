"""The GPU verdict table: which signal makes a GPU `degraded` or `failed`, and the reason.

RULES is the contract (docs/inventory.md shows `markdown_table()` verbatim); `verdict`
applies it to one GPU's facts (gpu/health.py derives them). Worst verdict wins; reasons
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


@dataclass(frozen=True)
class Xid:
    meaning: str
    nvidia: str  # NVIDIA's Xid catalogue, "Resolution Bucket (Immediate Action)"
    verdict: str
    action: str  # what an operator does: reset needed, reboot needed, drain, restart the app, none


# NVIDIA's Xid catalogue (Ampere and later: docs.nvidia.com/deploy/xid-errors), its
# "Resolution Bucket (Immediate Action)" per code, for the codes a fleet meets; a code not
# here is kept in the GPU's history and changes nothing. RESTART_APP and IGNORE codes are an
# application's fault or a consequence of another Xid (the GPU stays ok; 94 asks for a
# reset when convenient: degraded); RESET_GPU and the 48/NVLink workflows ("a GPU reset or
# node reboot is needed") fail the GPU until a reset, RESTART_BM until a reboot. 154 only
# says the driver's recovery action changed: the recovery_* rules read the action itself.
XIDS: dict[int, Xid] = {
    13: Xid("graphics engine exception", "RESTART_APP", OK, "restart the app"),
    31: Xid("GPU memory page fault", "RESTART_APP", OK, "restart the app"),
    43: Xid("GPU stopped processing (an application's fault)", "IGNORE", OK, "none"),
    45: Xid("preemptive cleanup after an earlier error", "WORKFLOW_XID_45", OK, "none (follow the other Xid)"),
    46: Xid("GPU stopped processing", "RESET_GPU", FAILED, "reset needed"),
    48: Xid("double-bit ECC error", "WORKFLOW_XID_48", FAILED, "reset needed"),
    61: Xid("internal micro-controller breakpoint", "CONTACT_SUPPORT (unused on Ampere+)", DEGRADED, "reset needed"),
    62: Xid("internal micro-controller halt", "RESET_GPU", FAILED, "reset needed"),
    63: Xid("row remapping event", "IGNORE", OK, "none (remapped_rows.pending says when a reset is due)"),
    64: Xid("row remapping failure", "RESET_GPU", FAILED, "reset needed"),
    68: Xid("video decoder exception", "RESTART_APP", OK, "restart the app"),
    69: Xid("graphics engine class error", "RESTART_APP", OK, "restart the app"),
    74: Xid("NVLink error", "WORKFLOW_NVLINK_ERR", FAILED, "reset needed"),
    79: Xid("GPU has fallen off the bus", "RESTART_BM", FAILED, "reboot needed"),
    92: Xid("high single-bit ECC error rate", "IGNORE", OK, "none"),
    94: Xid("contained ECC error", "RESTART_APP", DEGRADED, "reset needed, when convenient"),
    95: Xid("uncontained ECC error", "RESET_GPU", FAILED, "reset needed"),
    109: Xid("context switch timeout", "RESET_GPU", FAILED, "reset needed"),
    119: Xid("GSP RPC timeout", "RESET_GPU", FAILED, "reset needed"),
    120: Xid("GSP error", "RESET_GPU", FAILED, "reset needed"),
    121: Xid("C2C link corrected error", "IGNORE", OK, "none"),
    140: Xid("unrecovered ECC error", "RESET_GPU", FAILED, "reset needed"),
    143: Xid("GPU initialization failure", "RESET_GPU", FAILED, "reset needed"),
    154: Xid("GPU recovery action changed", "XID_154", DEGRADED, "as the recovery action says"),
    158: Xid("GPU fatal timeout", "RESET_GPU", FAILED, "reset needed"),
}
XID_FAILED = {code: x.meaning for code, x in XIDS.items() if x.verdict == FAILED}
XID_DEGRADED = {code: x.meaning for code, x in XIDS.items() if x.verdict == DEGRADED}
RECOVERY_FAILED = ("gpu_reset", "node_reboot", "drain_and_reset", "bus_reset", "system_reboot")
THROTTLE_SLOWDOWNS = ("hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown")
RETIRED_PAGES_LIMIT = 64  # the most pages NVIDIA's driver retires on one GPU: none are left after


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
        return [xid_reason(code) for code in codes]

    return reasons


def xid_reason(code: int) -> str:
    xid = XIDS[code]
    return f"Xid {code}: {xid.meaning} ({xid.action})"


def _xid_list(table: dict[int, str]) -> str:
    codes = ", ".join(str(code) for code in table)
    return f"an Xid event within GPU_XID_HOLD_SEC: {codes} (the Xid table below)"


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
        "hung",
        FAILED,
        "an NVML call on this GPU (or, when NVML cannot tell, on the node) has not returned "
        "within INVENTORY_PROBE_TIMEOUT_SEC",
        lambda facts: [f"NVML call hung: {facts['hung']}"] if facts.get("hung") else [],
        "NVML call hung: nvmlDeviceGetFieldValues",
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
        "xid_degrading",
        DEGRADED,
        _xid_list(XID_DEGRADED),
        _xids(XID_DEGRADED),
        "Xid 94: contained ECC error (reset needed, when convenient)",
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
        "| Xid | meaning | NVIDIA's immediate action | verdict | action |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [f"| {c} | {x.meaning} | `{x.nvidia}` | `{x.verdict}` | {x.action} |" for c, x in XIDS.items()]
    return "\n".join(lines)


def markdown_table() -> str:
    """The table as docs/inventory.md shows it."""
    lines = ["| rule | signal | verdict | reason (example) |", "| --- | --- | --- | --- |"]
    lines += [f"| `{r.name}` | {r.when} | `{r.verdict}` | `{r.example}` |" for r in RULES]
    return "\n".join(lines)
