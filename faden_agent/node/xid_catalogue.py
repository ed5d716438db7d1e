"""NVIDIA's Xid catalogue as this agent uses it: per code its meaning, the catalogue's
"Resolution Bucket (Immediate Action)", the verdict it gives its GPU, the operator's action,
what ends its hold (the remedy) and what it says of a death. Read by the GPU verdicts
(workers/inventory/gpu) and the death causes (workers/executor/death_cause.py).
"""

from __future__ import annotations

from typing import NamedTuple

OK = "ok"
DEGRADED = "degraded"
FAILED = "failed"

# What ends an Xid's hold on its GPU's verdict (gpu/holds.py applies it).
RESET = "reset"  # a reset of that GPU (or a reboot) is seen
REBOOT = "reboot"  # the machine rebooted (a new boot id)
CLOCK = "clock"  # GPU_XID_HOLD_SEC after it, or a reset or reboot before that
HISTORY = "history"  # no verdict: kept in the GPU's history only
RESET_BUCKETS = ("RESET_GPU", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR")
REBOOT_BUCKETS = ("RESTART_BM",)
APPLICATION_BUCKETS = ("RESTART_APP", "IGNORE", "WORKFLOW_XID_45")  # a death after one is the application's
HOLD_ENDS = {
    RESET: "a reset of this GPU, or a reboot",
    REBOOT: "a reboot (a new boot id)",
    CLOCK: "GPU_XID_HOLD_SEC, or a reset or reboot before",
    HISTORY: "(no verdict)",
}


class Xid(NamedTuple):
    meaning: str
    nvidia: str  # NVIDIA's Xid catalogue, "Resolution Bucket (Immediate Action)"
    verdict: str
    action: str  # what an operator does: reset needed, reboot needed, drain, restart the app, none

    @property
    def hold(self) -> str:
        """What ends this Xid's hold: the catalogue's remedy, the clock only where it names none."""
        if self.nvidia in RESET_BUCKETS:
            return RESET
        if self.nvidia in REBOOT_BUCKETS:
            return REBOOT
        return CLOCK if self.verdict != OK else HISTORY

    @property
    def gpu_fault(self) -> bool:
        """The catalogue files it as a fault of the GPU (a reset or a reboot cures it)."""
        return self.hold in (RESET, REBOOT)

    @property
    def application(self) -> bool:
        """The catalogue files it under the application (or the driver's cleanup after one)."""
        return self.nvidia in APPLICATION_BUCKETS


# NVIDIA's Xid catalogue (Ampere and later: docs.nvidia.com/deploy/xid-errors, the "Xid
# Catalog"), its "Resolution Bucket (Immediate Action)" per code, for the codes a fleet
# meets; a code not here is kept in the GPU's history and changes nothing. RESTART_APP and
# IGNORE codes are an application's fault or a consequence of another Xid (the GPU stays ok;
# 94 asks for a reset when convenient: degraded); RESET_GPU and the 48/NVLink workflows fail
# the GPU until it is reset, RESTART_BM until a reboot. 154 only says the driver's recovery
# action changed: the recovery_* rules read the action itself.
XIDS: dict[int, Xid] = {
    8: Xid("GPU stopped processing (channel idle timeout)", "RESTART_APP", OK, "restart the app"),
    13: Xid("graphics engine exception", "RESTART_APP", OK, "restart the app"),
    31: Xid("GPU memory page fault", "RESTART_APP", OK, "restart the app"),
    32: Xid("invalid or corrupted push buffer stream", "RESTART_APP", OK, "restart the app"),
    43: Xid("GPU stopped processing (an application's fault)", "IGNORE", OK, "none"),
    44: Xid("graphics engine fault during context switch", "IGNORE", OK, "none"),
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
    110: Xid("security fault", "RESET_GPU", FAILED, "reset needed"),
    119: Xid("GSP RPC timeout", "RESET_GPU", FAILED, "reset needed"),
    120: Xid("GSP error", "RESET_GPU", FAILED, "reset needed"),
    121: Xid("C2C link corrected error", "IGNORE", OK, "none"),
    136: Xid("NVLink training failed", "RESET_GPU", FAILED, "reset needed"),
    137: Xid("NVLink privilege error", "IGNORE", OK, "none"),
    140: Xid("unrecovered ECC error", "RESET_GPU", FAILED, "reset needed"),
    143: Xid("GPU initialization failure", "RESET_GPU", FAILED, "reset needed"),
    154: Xid("GPU recovery action changed", "XID_154", DEGRADED, "as the recovery action says"),
    155: Xid("NVLink software-defined error", "RESET_GPU", FAILED, "reset needed"),
    156: Xid("resource retirement event", "RESET_GPU", FAILED, "reset needed"),
    158: Xid("GPU fatal timeout", "RESET_GPU", FAILED, "reset needed"),
}

# NVML's other error events (the names gpu/xids.py keeps them under) as a death's cause reads
# them: a double-bit ECC error, uncontained poison and a GPU gone are the GPU's fault, a
# contained (non-fatal) poison is the application's, like Xid 94.
GPU_FAULT_EVENTS = ("double_bit_ecc", "fatal_poison", "gpu_unavailable", "dram_retirement_failure")
APPLICATION_EVENTS = ("non_fatal_poison",)
