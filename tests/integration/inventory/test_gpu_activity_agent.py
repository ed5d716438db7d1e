"""GPU activity from GPM in a real inventory worker, through the real pynvml and the C NVML
(tests/nvml/gpm.c): an H100 with GPM gets SM active, SM occupancy, tensor active and DRAM
active in its record (percent, under usage) and in /metrics (ratios 0..1), a MIG GPU per
GPU instance too; an A100 (no GPM) keeps utilization.gpu and its record says why."""

from __future__ import annotations

import pytest

from faden_agent import protocol
from faden_agent.workers.inventory.gpu.gpm import NO_GPU
from tests.nvml.gpm import MigGpuState, with_gpm
from tests.nvml.state import GiB
from tests.support.agentproc import agent_env, wait_for
from tests.support.metricsclient import get, promtool_check
from tests.support.outboxevents import outbox_rows
from tests.support.sampleworkers import supervisor_argv

INVENTORY_ONLY = supervisor_argv({"inventory": "faden_agent.workers.inventory.worker:InventoryWorker"})
ACTIVITY = ("sm_active", "sm_occupancy", "tensor_active", "dram_active")


def latest_usage(state_dir, index: int) -> dict | None:
    """GPU `index`'s usage as the records last sent it: a full record's, or an unchanged one's."""
    for row in reversed(outbox_rows(state_dir, protocol.INVENTORY)):
        gpu = row.get("gpu") or (row.get("usage") or {}).get("gpu") or {}
        devices = gpu.get("devices") or []
        if len(devices) > index and (devices[index] or {}).get("usage"):
            return devices[index]["usage"]
    return None


def full_device(state_dir, index: int) -> dict:
    full = [row for row in outbox_rows(state_dir, protocol.INVENTORY) if row.get("type") == "full"]
    return full[-1]["gpu"]["devices"][index]


@pytest.mark.timeout(180)
def test_gpm_figures_in_the_record_and_metrics_and_a_gpu_without_says_why(tmp_path, agent_factory):
    gpus = MigGpuState(tmp_path / "nvml", count=3)
    with_gpm(gpus.gpus[0], sm_active=61.5, sm_occupancy=30, tensor_active=12.5, dram_active=44)
    gpus.gpus[1]["name"] = "NVIDIA A100-SXM4-80GB"  # Ampere: no GPM (no gpm keys)
    gpus.gpus[1]["cc_major"] = 8
    with_gpm(gpus.gpus[2], sm_active=50, sm_occupancy=20, tensor_active=5, dram_active=10)
    gpus.add_mig(2, 1, "MIG-11111111-fake", 40 * GiB, sm_active=80, sm_occupancy=40, tensor_active=25, dram_active=7.5)
    # A round's figures are over the time since the one before: the first full record has none,
    # the gauges come with the next record that carries usage (every round: a gauge age of 1 s).
    env = agent_env(tmp_path, inventory_interval_sec=1, inventory_usage_sec=1)
    env.update(gpus.env())
    agent = agent_factory(env, argv=INVENTORY_ONLY).start()
    state_dir = tmp_path / "state"

    usage = wait_for(lambda: (latest_usage(state_dir, 0) or {}).get("sm_active") and latest_usage(state_dir, 0), 30)
    assert {k: usage[k] for k in ACTIVITY} == {
        "sm_active": 61.5,
        "sm_occupancy": 30.0,
        "tensor_active": 12.5,
        "dram_active": 44.0,
    }
    assert usage["utilization_gpu"] == 37  # beside them, as before
    without = full_device(state_dir, 1)
    assert without["gpm"] == {"available": False, "reason": NO_GPU}
    assert without["usage"]["utilization_gpu"] == 37 and not set(ACTIVITY) & set(without["usage"])
    assert full_device(state_dir, 0)["gpm"] == {"available": True, "reason": None}
    (instance,) = full_device(state_dir, 2)["mig"]["devices"]
    assert (instance["uuid"], instance["gpu_instance_id"]) == ("MIG-11111111-fake", 1)

    scrape = wait_for(lambda: (s := get(agent)).value("faden_agent_gpu_mig_sm_active_ratio") is not None and s, 20)
    uuid0, uuid1, uuid2 = (gpu["uuid"] for gpu in gpus.gpus)
    expected = {"sm_active": 0.615, "sm_occupancy": 0.30, "tensor_active": 0.125, "dram_active": 0.44}
    for name, ratio in expected.items():
        assert scrape.value(f"faden_agent_gpu_{name}_ratio", gpu="0", uuid=uuid0) == pytest.approx(ratio)
        assert scrape.value(f"faden_agent_gpu_{name}_ratio", gpu="1", uuid=uuid1) is None  # no GPM: no sample
    assert scrape.value("faden_agent_gpu_utilization_ratio", gpu="1", uuid=uuid1) == pytest.approx(0.37)
    mig = {"gpu": "2", "uuid": uuid2, "gpu_instance": "1", "mig_uuid": "MIG-11111111-fake"}
    assert scrape.value("faden_agent_gpu_mig_sm_active_ratio", **mig) == pytest.approx(0.80)
    assert scrape.value("faden_agent_gpu_mig_dram_active_ratio", **mig) == pytest.approx(0.075)
    assert scrape.value("faden_agent_gpu_sm_active_ratio", gpu="2", uuid=uuid2) == pytest.approx(0.50)
    assert promtool_check(scrape.body) == ""

    with_gpm(gpus.gpus[0], sm_active=5, sm_occupancy=2, tensor_active=0, dram_active=1)  # the SMs idle now
    gpus.write()
    wait_for(lambda: get(agent).value("faden_agent_gpu_sm_active_ratio", gpu="0") == pytest.approx(0.05), 20)
    wait_for(lambda: latest_usage(state_dir, 0)["sm_active"] == 5.0, 20, 0.2, "the new figure in a record")
    assert agent.workers()["inventory"]["restarts"] == 0
