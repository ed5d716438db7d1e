"""GPU activity from NVML's GPM (gpu/gpm.py) through the real pynvml and the C NVML, in a
child process (a process that loaded the library keeps it): no figure after one sample, the
state's figures from the second on, per MIG GPU instance too; a GPU before Hopper, a driver
without GPM and a failing sample each keep utilization.gpu and say why; a GPU gone frees its
sample buffers."""

from __future__ import annotations

import json

from faden_agent.workers.inventory.gpu.gpm import NO_DRIVER, NO_GPU
from tests.support.nvmlchild import run_child

SCRIPT = """
import json, sys
from pathlib import Path
from tests.nvml.state import GiB, load_in_process
from tests.nvml.gpm import MigGpuState, with_gpm
state = MigGpuState(Path(sys.argv[1]), count=3)
with_gpm(state.gpus[0], sm_active=61.5, sm_occupancy=30, tensor_active=12.5, dram_active=44)
with_gpm(state.gpus[2], sm_active=50, sm_occupancy=20, tensor_active=0, dram_active=10)
state.add_mig(2, 3, "MIG-three", 10 * GiB, sm_active=20, sm_occupancy=5, tensor_active=1, dram_active=2.5)
load_in_process(state)
import pynvml
from faden_agent.workers.inventory.gpu.probe import GpuProbe
probe = GpuProbe(pynvml)

def summary(section):
    return [
        {"usage": d["usage"], "gpm": d["gpm"], "mig": [m.get("usage") for m in (d["mig"] or {}).get("devices", [])]}
        for d in section["devices"]
    ]

out = {"first": summary(probe()), "second": summary(probe())}
with_gpm(state.gpus[0], sm_active=99, sm_occupancy=80, tensor_active=70, dram_active=60)
state.write()
out["moved"] = summary(probe())
del state.gpus[0]["gpm"]["5"]  # tensor active no longer measured
state.top["error"] = {"nvmlGpmSampleGet": 999}  # every whole-GPU sample fails
state.write()
out["failing"] = summary(probe())
state.top["error"] = {}
state.write()
out["again_first"] = summary(probe())
out["again"] = summary(probe())
state.top["count"] = 1  # GPUs 1 and 2 gone
state.write()
probe()
out["buffers"] = sorted(str(key) for key in probe.gpm._buffers)
driver = MigGpuState(Path(sys.argv[1]) / "old-driver", count=1)
with_gpm(driver.gpus[0], sm_active=1, sm_occupancy=1, tensor_active=1, dram_active=1)
driver.top["error"] = {"nvmlGpmQueryDeviceSupport": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}
driver.write()
load_in_process(driver)
old = GpuProbe(pynvml)
old(); out["old_driver"] = summary(old())
print(json.dumps(out))
"""


def test_gpm_figures_per_gpu_and_mig_instance_and_why_not(tmp_path):
    out = json.loads(run_child(SCRIPT, str(tmp_path)))
    first, before_hopper, mig = out["first"]
    assert first["gpm"] == {"available": True, "reason": None}
    assert "sm_active" not in first["usage"] and first["usage"]["utilization_gpu"] == 37  # one sample: no figure
    assert mig["mig"] == [{}]

    first, before_hopper, mig = out["second"]
    activity = {k: first["usage"][k] for k in ("sm_active", "sm_occupancy", "tensor_active", "dram_active")}
    assert activity == {"sm_active": 61.5, "sm_occupancy": 30.0, "tensor_active": 12.5, "dram_active": 44.0}
    assert first["usage"]["utilization_gpu"] == 37  # the old figure stays beside them
    assert before_hopper["gpm"] == {"available": False, "reason": NO_GPU}
    assert before_hopper["usage"]["utilization_gpu"] == 37 and "sm_active" not in before_hopper["usage"]
    assert mig["mig"] == [{"sm_active": 20.0, "sm_occupancy": 5.0, "tensor_active": 1.0, "dram_active": 2.5}]
    assert mig["usage"]["sm_active"] == 50.0

    assert out["moved"][0]["usage"]["sm_active"] == 99.0 and out["moved"][0]["usage"]["dram_active"] == 60.0

    failing = out["failing"]
    for device in (failing[0], failing[2]):
        assert device["gpm"]["available"] is True and device["gpm"]["reason"] == "Unknown Error"
        assert "sm_active" not in device["usage"] and device["usage"]["utilization_gpu"] == 37
    assert failing[2]["mig"][0]["sm_active"] == 20.0  # the instances' own samples still work

    # after a failed sample the pair starts over: one round without figures, then figures again
    assert "sm_active" not in out["again_first"][0]["usage"]
    again = out["again"][0]
    assert again["usage"]["sm_active"] == 99.0 and "tensor_active" not in again["usage"]
    assert again["gpm"] == {"available": True, "reason": "not measured: tensor_active"}

    assert out["buffers"] == [str(("GPU-00000000-fake", None))]  # GPUs 1 and 2 gone: their samples freed
    (old_driver,) = out["old_driver"]
    assert old_driver["gpm"] == {"available": False, "reason": NO_DRIVER}
    assert old_driver["usage"]["utilization_gpu"] == 37
