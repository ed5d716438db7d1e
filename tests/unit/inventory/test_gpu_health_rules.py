"""The verdict table (gpu/rules.py), the Xid log and the health_changed events, as data: the
NVML side of GPU health is tested through the C library in tests/integration/inventory/test_gpu_health.py."""

from __future__ import annotations

from pathlib import Path

from faden_agent.workers.inventory.gpu import rules as gpu_rules
from faden_agent.workers.inventory.gpu.changes import HealthChanges, event_id
from faden_agent.workers.inventory.gpu.health import node_health
from faden_agent.workers.inventory.gpu.holds import Holds
from faden_agent.workers.inventory.gpu.xids import XidLog

DOCS = Path(__file__).resolve().parents[3] / "docs" / "inventory.md"


def test_the_docs_show_the_code_table_verbatim():
    assert gpu_rules.markdown_table() in DOCS.read_text()
    assert gpu_rules.xid_markdown_table() in DOCS.read_text()
    assert len({r.name for r in gpu_rules.RULES}) == len(gpu_rules.RULES)


def test_the_xid_table_covers_the_catalogue_codes_with_an_action_each():
    wanted = {13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 121, 140, 143, 154}
    assert wanted <= set(gpu_rules.XIDS)
    for code, xid in gpu_rules.XIDS.items():
        # the verdict, the hold and a death's cause follow NVIDIA's immediate action
        if xid.nvidia in ("RESET_GPU", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR"):
            assert (xid.verdict, xid.action, xid.hold) == ("failed", "reset needed", gpu_rules.RESET), code
            assert xid.gpu_fault and not xid.application, code
        if xid.nvidia == "RESTART_BM":
            assert (xid.verdict, xid.action, xid.hold) == ("failed", "reboot needed", gpu_rules.REBOOT), code
        if xid.nvidia in ("RESTART_APP", "IGNORE", "WORKFLOW_XID_45"):
            assert xid.application and not xid.gpu_fault, code
            if code != 94:  # 94: a reset when convenient, on the clock
                assert xid.verdict == "ok" and xid.hold == gpu_rules.HISTORY, code
                assert xid.action.startswith(("restart the app", "none")), code
    assert gpu_rules.XIDS[94].hold == gpu_rules.CLOCK and gpu_rules.XIDS[45].application
    assert gpu_rules.verdict({"recent_xids": [79]}) == (
        "failed",
        ["Xid 79: GPU has fallen off the bus (reboot needed)"],
    )
    assert gpu_rules.verdict({"recent_xids": [109]}) == ("failed", ["Xid 109: context switch timeout (reset needed)"])
    assert gpu_rules.verdict({"recent_xids": [13, 31, 43, 45, 63, 68, 69, 92, 121]}) == ("ok", [])


def test_each_rule_example_is_what_its_rule_says():
    # every row's example reason is produced by facts that meet only that rule
    facts_of = {
        "lost": {"lost": "GPU is lost"},
        "unanswering": {"unanswering": "Unknown Error"},
        "sxid_fatal": {"sxid_fatal": ["NVSwitch 0000:c1:00: SXid 20034 (fatal): fabric reset needed"]},
        "temperature_shutdown": {"temperature": {"gpu": 92, "shutdown": 92}},
        "temperature_slowdown": {"temperature": {"gpu": 88, "slowdown": 87}},
        "hung": {"hung": "nvmlDeviceGetFieldValues"},
        "missing": {"missing": "2026-12-03T04:00:00Z"},
        "xid_fatal": {"recent_xids": [79]},
        "remap_failure": {"remap_failure": True},
        "retired_limit": {"retired_total": 64},
        "remap_none_left": {"remap_none_left": 2},
        "power_brake": {"power_brake": True},
        "uncorrected_aggregate": {"uncorrected_aggregate": 3},
        "ecc_off": {"ecc_off": True},
        "persistence_off": {"persistence_off": True},
        "mig_pending": {"mig_pending": True},
        "recovery_reset": {"recovery_action": "gpu_reset"},
        "fabric_failed": {"fabric": {"state": "completed", "status": "Unknown Error"}},
        "xid_degrading": {"recent_xids": [94]},
        "remap_pending": {"remap_pending": True},
        "retired_pending": {"retired_pending": True},
        "recovery_drain": {"recovery_action": "drain_p2p"},
        "throttled": {"throttled": ["hw_thermal_slowdown"]},
        "uncorrected_ecc": {"uncorrected_rising": True},
        "nvlink_errors": {"nvlink_rising": ["crc_flit"]},
        "nvlink_down": {"nvlink_down": [3]},
        "pcie_replays": {"pcie_rising": True},
        "pcie_width": {"pcie": {"width": 8, "width_max": 16}},
        "check_failed": {
            "check_failed": ["DCGM diagnostic level 2 failed: memory: Found 1 faulty memory elements on GPU 0"]
        },
        "check_warned": {
            "check_warned": ["DCGM diagnostic level 2 warned: pcie: GPU 0 host-side PCIe replay violation"]
        },
        "fabric_pending": {"fabric": {"state": "in_progress", "status": None}},
        "nvml_error": {"nvml_errors": ["Unknown Error"]},
    }
    assert set(facts_of) == {r.name for r in gpu_rules.RULES}
    for rule in gpu_rules.RULES:
        assert gpu_rules.verdict(facts_of[rule.name]) == (rule.verdict, [rule.example]), rule.name


def test_worst_verdict_wins_and_reasons_keep_the_table_order():
    facts = {"pcie_rising": True, "recent_xids": [13, 79, 79], "remap_pending": True}
    assert gpu_rules.verdict(facts) == (
        "failed",
        [
            "Xid 79: GPU has fallen off the bus (reboot needed)",
            "row remap pending: reset needed",
            "PCIe replays over 8 a minute",
        ],
    )
    # an application's Xid (13: graphics engine exception) is history, not a verdict
    assert gpu_rules.verdict({"recent_xids": [13, 31, 43]}) == ("ok", [])
    assert gpu_rules.verdict({"recovery_action": "none", "fabric": {"state": "completed", "status": None}}) == (
        "ok",
        [],
    )


def test_the_xid_log_keeps_the_last_n_and_wakes_once_per_kind():
    log = XidLog(keep=3)
    assert log.add("GPU-a", "xid", 79, 100.0) is True
    assert log.add("GPU-a", "xid", 79, 101.0) is False  # a repeat: the next interval shows it
    assert log.add("GPU-a", "xid", 13, 102.0) is False  # no rule for Xid 13: no record now
    assert log.add("GPU-a", "double_bit_ecc", 0, 103.0) is True
    # full: the Xid that changes nothing (13) goes first
    assert [(e["code"], e["at"]) for e in log.of("GPU-a")] == [(79, 100.0), (79, 101.0), (0, 103.0)]
    assert log.of("GPU-b") == [] and log.of(None) == []


def test_a_storm_of_application_xids_never_pushes_out_a_fatal_one():
    log = XidLog(keep=4)
    log.add("GPU-a", "xid", 13, 1.0)
    log.add("GPU-a", "xid", 48, 2.0)
    for n in range(100):
        log.add("GPU-a", "xid", 13, 3.0 + n)
    assert [(e["code"], e["at"]) for e in log.of("GPU-a")] == [(48, 2.0), (13, 100.0), (13, 101.0), (13, 102.0)]


def test_xid_totals_only_grow_and_survive_a_restore():
    log = XidLog(keep=2)
    for n in range(5):
        log.add("GPU-a", "xid", 13, float(n))
    log.add("GPU-a", "xid", 13, 4.0)  # the same line again: not counted twice
    log.add("GPU-a", "double_bit_ecc", 0, 9.0)  # not an Xid
    assert log.totals("GPU-a") == {"13": 5} and len(log.of("GPU-a")) == 2
    again = XidLog()
    again.restore_totals("GPU-a", {"13": 5, "x": 1, "48": -1, "79": "2"})
    again.add("GPU-a", "xid", 13, 20.0)
    assert again.totals("GPU-a") == {"13": 6}


def test_a_repeat_after_its_hold_ended_wakes_the_probe_again():
    holds = Holds(60.0, "b" * 32, clock=lambda: 1000.0)
    log = XidLog(keep=8, holds=holds)
    assert log.add("GPU-a", "xid", 94, 100.0) is True  # a clock-class Xid
    assert log.add("GPU-a", "xid", 94, 150.0) is False  # within the hold: the verdict stands
    assert log.add("GPU-a", "xid", 94, 211.0) is True  # the hold of both ran out: news again
    assert log.add("GPU-a", "xid", 48, 300.0) is True  # a reset-class Xid ...
    assert log.add("GPU-a", "xid", 48, 9000.0) is False  # ... holds past any clock
    holds.reset_seen("GPU-a", "ecc_corrected_volatile went back from 5 to 0", at=9100.0)
    assert log.add("GPU-a", "xid", 48, 9200.0) is True  # after the reset: news again
    assert [e["boot"] for e in log.of("GPU-a")] == ["b" * 32] * 6


def device(index, verdict, reasons=(), uuid=None):
    return {
        "index": index,
        "uuid": uuid or f"GPU-{index}",
        "pci_bus_id": f"00000000:{index:02X}:00.0",
        "health": {"verdict": verdict, "reasons": list(reasons)},
    }


def test_a_verdict_change_is_one_event_and_a_steady_one_none():
    changes = HealthChanges()
    assert changes.events({"devices": [device(0, "ok"), device(1, "ok")]}, 10.0) == []
    events = changes.events({"devices": [device(0, "ok"), device(1, "degraded", ["PCIe replays rising"])]}, 11.0)
    assert events == [
        {
            "type": "gpu.health_changed",
            "index": 1,
            "uuid": "GPU-1",
            "pci_bus_id": "00000000:01:00.0",
            "old": "ok",
            "new": "degraded",
            "reasons": ["PCIe replays rising"],
            "at": 11.0,
        }
    ]
    assert event_id(events[0]) == "ev:gpu:GPU-1:11000"
    assert changes.events({"devices": [device(0, "ok"), device(1, "degraded", ["other"])]}, 12.0) == []
    back = changes.events({"devices": [device(0, "ok"), device(1, "ok")]}, 13.0)
    assert [(e["old"], e["new"]) for e in back] == [("degraded", "ok")]
    # first seen failing is news (old: null); a GPU without a UUID is keyed by its index
    first = changes.events(
        {"devices": [{"index": 2, "health": {"verdict": "failed", "reasons": ["GPU is lost"]}}]}, 14.0
    )
    assert [(e["index"], e["uuid"], e["old"], e["new"]) for e in first] == [(2, None, None, "failed")]
    assert changes.events(None, 15.0) == []


def test_the_node_verdict_is_its_worst_gpu_with_reasons_by_index():
    devices = [device(0, "ok"), device(1, "degraded", ["PCIe replays rising"])]
    missing = [device(2, "failed", ["GPU missing since 2026-12-03T04:00:00Z"])]
    assert node_health(devices, missing, None) == {
        "verdict": "failed",
        "reasons": ["GPU 1: PCIe replays rising", "GPU 2: GPU missing since 2026-12-03T04:00:00Z"],
    }
    assert node_health([], [], "no NVIDIA driver loaded") == {
        "verdict": "failed",
        "reasons": ["no NVIDIA driver loaded"],
    }
    assert node_health([device(0, "ok")], [], None) == {"verdict": "ok", "reasons": []}
