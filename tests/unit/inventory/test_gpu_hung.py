"""A hung NVML call as a verdict (GpuProbe.hung), through the real pynvml and the C library
in a child process: the GPU being read is failed naming the call, a hang outside any GPU
fails the node, the other GPUs keep their verdicts and take Xids logged during the hang."""

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
state = GpuState(Path(sys.argv[1]), count=3)
load_in_process(state)
import pynvml
from faden_agent.workers.inventory.gpu.probe import GpuProbe
from faden_agent.workers.inventory.probes import Probe

def verdicts(section):
    return [section["health"]["verdict"], section["health"]["reasons"],
            [(d["index"], d["health"]["verdict"], d["health"]["reasons"]) for d in section["devices"]]]

out = {}
first = GpuProbe(pynvml)
good = first()
state.gpus[1]["hang_ms"] = {"nvmlDeviceGetFieldValues": 3000}
state.write()
probe = Probe("gpu", first, 0.3)
probe.start()
assert probe.wait().status == "overrun"
first.health.xids.add(state.gpus[2]["uuid"], "xid", 79, __import__("time").time())
out["gpu"] = verdicts(first.hung(good))

state.gpus[1]["hang_ms"] = {}
state.top["hang_ms"] = {"nvmlDeviceGetCount_v2": 3000}
state.write()
node = GpuProbe(pynvml)
probe = Probe("gpu", node, 0.3)
probe.start()
assert probe.wait().status == "overrun"
out["node_first_round"] = verdicts(node.hung(None))
print(json.dumps(out))
"""


def test_a_hung_call_fails_its_gpu_or_the_node(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out = json.loads(done.stdout)
    assert out["gpu"] == [
        "failed",
        [
            "GPU 1: NVML call hung: nvmlDeviceGetFieldValues",
            "GPU 2: Xid 79: GPU has fallen off the bus (reboot needed)",
        ],
        [
            [0, "ok", []],
            [1, "failed", ["NVML call hung: nvmlDeviceGetFieldValues"]],
            [2, "failed", ["Xid 79: GPU has fallen off the bus (reboot needed)"]],
        ],
    ]
    # a first round that never came back, in a call on no GPU: the node is failed
    assert out["node_first_round"] == ["failed", ["NVML call hung: nvmlDeviceGetCount"], []]
