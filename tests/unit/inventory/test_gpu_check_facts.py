"""How a check enters its GPU's verdict (health.py, check_facts): a DCGM failure or warning on an
idle GPU counts until a later check, a reset after it (the agent's own included) or a reboot;
NVML's checks and checks of busy GPUs never do; of two resets the later is kept."""

from __future__ import annotations

from faden_agent.workers.inventory.gpu import rules
from faden_agent.workers.inventory.gpu.health import HealthReader
from faden_agent.workers.inventory.gpu.holds import Holds
from faden_agent.workers.inventory.gpu.xids import XidLog

BOOT = "b" * 32


def reader() -> tuple[HealthReader, list[float]]:
    now = [1000.0]
    holds = Holds(3600, BOOT, clock=lambda: now[0])
    return HealthReader(XidLog(holds=holds), clock=lambda: now[0]), now


def check(at: float, **fields) -> dict:
    base = {"at": at, "tool": "dcgm", "level": 2, "outcome": "fail", "counted": True, "boot": BOOT}
    return {**base, "failed": ["memory: Found 1 faulty memory elements on GPU 0"], "warned": [], **fields}


def test_a_dcgm_failure_counts_until_a_reset_after_it_or_a_reboot():
    health, now = reader()
    health.note_check("GPU-a", check(1000.0))
    facts = health.check_facts("GPU-a")
    assert rules.verdict(facts) == (
        "failed",
        ["DCGM diagnostic level 2 failed: memory: Found 1 faulty memory elements on GPU 0"],
    )
    health.holds.reset_seen("GPU-a", "ecc went back", at=900.0)  # a reset before the check: still counts
    assert health.check_facts("GPU-a")["check_failed"]
    health.holds.reset_seen("GPU-a", "reset by the agent (gpu.reset c-1), level-1 check pass", at=1001.0)
    assert health.check_facts("GPU-a") == {"check_failed": [], "check_warned": []}
    health.holds.reset_seen("GPU-a", "ecc went back", at=950.0)  # NVML's sign of it, dated before: not kept
    assert health.holds.last_reset("GPU-a")["sign"].startswith("reset by the agent")

    health.note_check("GPU-b", check(1000.0, boot="a" * 32))  # in an earlier boot
    assert health.check_facts("GPU-b")["check_failed"] == []


def test_nvml_checks_busy_gpus_and_passes_never_count():
    health, _ = reader()
    for fields in ({"tool": "nvml"}, {"counted": False}, {"outcome": "pass", "failed": []}):
        health.note_check("GPU-a", check(1000.0, **fields))
        assert health.check_facts("GPU-a") == {"check_failed": [], "check_warned": []}, fields
    health.note_check("GPU-a", check(1000.0, outcome="warn", failed=[], warned=["pcie: replays"]))
    assert rules.verdict(health.check_facts("GPU-a")) == ("degraded", ["DCGM diagnostic level 2 warned: pcie: replays"])
    health.forget("GPU-a")
    assert health.checks == {}
