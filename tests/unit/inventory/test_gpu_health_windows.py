"""The time windows of the verdict table, on a clock the test turns: a throttle counts only
past GPU_THROTTLE_SEC, PCIe replays count as a rate (over 8 a minute) held GPU_RISING_SEC,
an Xid until its remedy: 48 past the hour until a reset shows in NVML, 79 until a new boot id,
94 (neither) for GPU_XID_HOLD_SEC or until a reset. Through the real pynvml and the C NVML,
in a child process (a process that loaded the library keeps it)."""

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
from faden_agent.workers.inventory.gpu.holds import Holds
from faden_agent.workers.inventory.gpu.xids import XidLog
now = [1000.0]
xids = XidLog(holds=Holds(3600, "b" * 32))
probe = GpuProbe(pynvml, HealthReader(xids, throttle_s=60, rising_s=600, clock=lambda: now[0]))
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
steps.append(step(0, lambda: gpu["pcie"].update(replay=1)))  # one replay: no rate
steps.append(step(30, lambda: gpu["pcie"].update(replay=10)))  # 9 more within the minute: over 8
steps.append(step(600))  # still within the window
steps.append(step(1))  # the window has passed, the count stands still
steps.append(step(120, lambda: gpu["pcie"].update(replay=18)))  # 8 in two minutes: no rate
xids.add(gpu["uuid"], "xid", 48, now[0])
steps.append(step(7200))  # two hours: no reset, still failed
steps.append(step(1, lambda: state.reset(0)))  # the reset shows: 48 ends
xids.add(gpu["uuid"], "xid", 79, now[0], boot="a" * 32)  # logged in an earlier boot: the reboot ended it
xids.add(gpu["uuid"], "xid", 94, now[0])
steps.append(step(3600))
steps.append(step(1))  # 94's clock ran out
xids.add(gpu["uuid"], "xid", 79, now[0])  # this boot's
steps.append(step(7200, lambda: state.reset(0)))  # a reset does not end a reboot-class Xid
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
        [62, "ok", []],
        [92, "degraded", ["PCIe replays over 8 a minute"]],
        [692, "degraded", ["PCIe replays over 8 a minute"]],
        [693, "ok", []],
        [813, "ok", []],
        [8013, "failed", ["Xid 48: double-bit ECC error (reset needed)"]],
        [8014, "ok", []],
        [11614, "degraded", ["Xid 94: contained ECC error (reset needed, when convenient)"]],
        [11615, "ok", []],
        [18815, "failed", ["Xid 79: GPU has fallen off the bus (reboot needed)"]],
    ]
