"""bench/gpu_probe.py, the script a GPU machine runs, against the C-level NVML: it prints
the gpu section with health and each call's time, and its fixture's state replays the
same values through the C library (so a real device's recording becomes a test GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.nvml.gpm import with_gpm
from tests.nvml.state import GpuState

ROOT = Path(__file__).resolve().parents[3]


def run_probe(state: GpuState, *args: str) -> dict:
    env = {**os.environ, **state.env(), "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_probe.py"), "--rounds", "2", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout)


def steady(inventory: dict) -> dict:
    """What a replay must reproduce: everything but the Xid history (events are not state)."""
    for device in inventory["devices"]:
        device["health"].pop("xid")
    return inventory


def test_the_probe_records_values_and_call_times_and_its_fixture_replays(tmp_path):
    state = GpuState(tmp_path / "real", count=2)
    sick = state.gpus[1]
    sick["remap"].update(pending=1, correctable=3)
    sick["nvlink"]["1"].update(crc_flit=12, replay=2)
    sick["pcie"].update(replay=4, gen=3)
    sick["fabric"].update(state=2)
    with_gpm(state.gpus[0], sm_active=61.5, sm_occupancy=30, tensor_active=12.5, dram_active=44)
    state.write()
    recorded = run_probe(state, "--fixture", str(tmp_path / "fixtures"))
    inventory = recorded["inventory"]
    assert inventory["devices"][0]["usage"]["sm_active"] == 61.5  # GPM's, recorded (its second round)
    assert inventory["devices"][1]["health"]["reasons"] == [
        "row remap pending: reset needed",
        "fabric not ready: in_progress",
    ]
    assert inventory["devices"][1]["health"]["nvlink"]["links"][1]["errors"]["crc_flit"] == 12
    calls = recorded["queries"]
    assert calls["nvmlDeviceGetFieldValues"]["calls"] >= 4 and calls["nvmlDeviceGetRemappedRows"]["median_ms"] >= 0
    assert len(recorded["round_cpu_ms"]) == 2

    (fixture,) = (tmp_path / "fixtures").iterdir()
    assert fixture.name == "NVIDIA-H100-80GB-HBM3-550.54.15.json"
    saved = json.loads(fixture.read_text())
    replay = GpuState(tmp_path / "replay", count=0)
    replay.load(saved["state"])
    assert steady(run_probe(replay)["inventory"]) == steady(inventory)


def test_a_wild_link_count_is_capped_at_nvml_s_maximum(tmp_path):
    state = GpuState(tmp_path / "wild", count=1)
    state.gpus[0]["nvlink"]["links"] = 10**9
    state.write()
    recorded = run_probe(state)
    nvlink = recorded["inventory"]["devices"][0]["health"]["nvlink"]
    assert len(nvlink["links"]) == 36 and nvlink["links"][1]["active"] is True
