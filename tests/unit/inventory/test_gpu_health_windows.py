"""The time windows of the verdict table, on a clock the test turns: a throttle counts only
past GPU_THROTTLE_SEC, a counter rise holds for GPU_RISING_SEC, an Xid for
GPU_XID_HOLD_SEC. Through the real pynvml and the C NVML, in a child process (a process
that loaded the library keeps it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = """
import json, sys
from pathlib import Path
from tests.nvml.state import GpuState, load_in_process
state = GpuState(Path(sys.argv[1]), count=1)
load_in_process(state)
import pynvml
from faden_agent.workers.inventory.gpu.probe import GpuProbe
from faden_agent.workers.inventory.gpu.health import HealthReader
from faden_agent.workers.inventory.gpu.xids import XidLog
now = [1000.0]
xids = XidLog()
probe = GpuProbe(pynvml, HealthReader(xids, throttle_s=60, rising_s=600, xid_hold_s=3600, clock=lambda: now[0]))
gpu = state.gpus[0]

def step(seconds, change=None):
    now[0] += seconds
    if change:
        change()
        state.write()
    health = probe()["devices"][0]["health"]
    return [now[0] - 1000, health["verdict"], health["reasons"]]

steps = [step(0)]
steps.append(step(0, lambda: gpu.update(clocks_event_reasons=0x8)))  # hw_slowdown starts
steps.append(step(60))  # exactly the limit: not yet
steps.append(step(1))  # past it
steps.append(step(1, lambda: gpu.update(clocks_event_reasons=0)))  # over
steps.append(step(0, lambda: gpu["pcie"].update(replay=1)))  # a rise
steps.append(step(600))  # still within the window
steps.append(step(1))  # the window has passed, the count stands still
xids.add(gpu["uuid"], "xid", 79, now[0])
steps.append(step(3600))
steps.append(step(1))
print(json.dumps(steps))
"""


def test_the_windows_open_and_close_on_time(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(out.stdout) == [
        [0, "ok", []],
        [0, "ok", []],
        [60, "ok", []],
        [61, "degraded", ["hw_slowdown active over the throttle limit"]],
        [62, "ok", []],
        [62, "degraded", ["PCIe replays rising"]],  # 0 -> 1 since the last round
        [662, "degraded", ["PCIe replays rising"]],
        [663, "ok", []],
        [4263, "failed", ["Xid 79: GPU has fallen off the bus (reboot needed)"]],
        [4264, "ok", []],
    ]
