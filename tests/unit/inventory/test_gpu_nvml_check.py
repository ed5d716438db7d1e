"""NVML's own checks (gpu.check without DCGM) on real reads: the real pynvml and the C NVML in a
child process (a process that loaded the library keeps it). A healthy H100 passes every test;
one with every fault fails each test that reads it; one that answers nothing fails `responds`
and skips the rest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from faden_agent.workers.inventory.gpu import nvml_check

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = """
import json, sys
from pathlib import Path
from tests.nvml.state import GpuState, load_in_process
state = GpuState(Path(sys.argv[1]), count=3)
bad = state.gpus[1]
bad["pcie"].update(width=8, gen=3)
bad["remap"]["failure"] = 1
bad["clocks_event_reasons"] = 0x40  # hw_thermal_slowdown
bad["temperature"] = 95
bad["nvlink"]["1"]["active"] = 0
bad["nvlink"]["0"]["replay"] = 3
bad["fabric"]["status"] = 999
bad["recovery_action"] = 1
bad["ecc"]["uncorrected"] = {"volatile": 2, "aggregate": 2}
bad["retired"]["pending"] = 1
state.gpus[2]["fail_all"] = 999
state.write()
load_in_process(state)
import pynvml
from faden_agent.workers.inventory.gpu.probe import GpuProbe
from faden_agent.workers.inventory.gpu import nvml_check
probe = GpuProbe(pynvml)
devices = probe()["devices"]
print(json.dumps([nvml_check.tests(d) for d in devices] + [nvml_check.tests(probe.read_one(devices[0]["uuid"]))]))
"""


def checked(tmp_path: Path) -> list[list[dict]]:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_each_test_reads_its_signal(tmp_path):
    healthy, faulty, silent, fresh = checked(tmp_path)
    assert [t["name"] for t in healthy] == list(nvml_check.TESTS)
    assert {t["name"]: t["result"] for t in healthy} == dict.fromkeys(nvml_check.TESTS, "pass")
    assert fresh == healthy  # the fresh read of one GPU is the round's
    said = {t["name"]: (t["result"], t["detail"]) for t in faulty}
    assert said["pcie_link"] == ("fail", "link narrower than its maximum: gen 3 of 5, x8 of x16")
    assert said["remapped_rows"] == ("fail", "row remapping failed (0 correctable, 0 uncorrectable rows remapped)")
    assert said["clock_events"] == ("fail", "hardware slowdown active: hw_thermal_slowdown")
    assert said["temperature"][0] == "fail" and "shutdown" in said["temperature"][1]
    assert said["nvlink"] == ("fail", "1 of 2 links up; down: 1")
    assert said["fabric"] == ("fail", "fabric registration failed: Unknown Error")
    assert said["recovery_action"] == ("fail", "the driver asks for: gpu_reset")
    assert said["ecc"] == ("fail", "2 uncorrected ECC errors since the driver loaded")
    assert said["retired_pages"] == ("warn", "0 retired pages, a retirement pending: reset needed")
    assert nvml_check.outcome(faulty) == "fail" and nvml_check.outcome(healthy) == "pass"
    assert silent[0] == {"name": "responds", "result": "fail", "detail": "NVML: Unknown Error"}
    assert {t["result"] for t in silent[1:]} == {"skip"}


def test_an_idle_link_below_its_generation_is_a_hint_not_a_fault():
    device = {
        "state": "ok",
        "health": {"pcie": {"width": 16, "width_max": 16, "gen_max": 5}},
        "usage": {},
    }
    device["health"]["usage"] = {"pcie_gen": 1}
    (link,) = [t for t in nvml_check.tests(device) if t["name"] == "pcie_link"]
    assert link["result"] == "warn" and "idle GPUs train down" in link["detail"]
