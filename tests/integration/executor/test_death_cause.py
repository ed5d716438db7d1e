"""Deaths with their cause in a real agent (inventory + executor workers, the C-level NVML):
a container on GPU 2 killed 5 s after an Xid 79 on GPU 2 dies `suspected: hardware` with
that Xid; a container on GPU 0 dying then is `application`, with its exit code and its last
stderr lines; one on GPU 3 dying after GPU 3 turned degraded is `hardware` with that change.
The GPU evidence is the inventory's own file (gpu-evidence.json)."""

from __future__ import annotations

import time
import uuid

import pytest

from faden_agent import protocol
from faden_agent.node.gpu_faults import read_gpus
from tests.conftest import TEST_IMAGE
from tests.nvml.state import GpuState
from tests.support.agentproc import agent_env, wait_for
from tests.support.outboxevents import outbox_events
from tests.support.sampleworkers import supervisor_argv

pytestmark = pytest.mark.docker

WORKERS = supervisor_argv(
    {
        "inventory": "faden_agent.workers.inventory.worker:InventoryWorker",
        "executor": "faden_agent.workers.executor.worker:ExecutorWorker",
    }
)


@pytest.fixture
def on_gpu(docker_client):
    started = []

    def run(gpu: int, last_words: str):
        container = docker_client.containers.run(
            TEST_IMAGE,
            ["sh", "-c", f"echo '{last_words}' >&2; exec sleep 600"],
            name=f"faden-i43-death-{uuid.uuid4().hex[:8]}",
            labels={protocol.LABEL_MANAGED: "true"},
            environment={"NVIDIA_VISIBLE_DEVICES": str(gpu)},
            detach=True,
        )
        started.append(container)
        return container

    yield run
    for container in started:
        container.remove(force=True)


def test_a_death_after_an_xid_on_its_gpu_is_hardware_another_is_application(tmp_path, agent_factory, on_gpu):
    gpus = GpuState(tmp_path / "nvml", count=4)
    env = agent_env(tmp_path, inventory_interval_sec=1, workload_fault_window_sec=60)
    env.update(gpus.env())
    agent_factory(env, argv=WORKERS).start()
    state_dir = tmp_path / "state"
    wait_for(lambda: len(read_gpus(state_dir)) == 4, 30, 0.2, "the inventory's GPU evidence")
    on_gpu2 = on_gpu(2, "CUDA error: an illegal memory access was encountered")
    on_gpu0 = on_gpu(0, "ValueError: the prompt is too long")
    on_gpu3 = on_gpu(3, "NCCL error: unhandled system error")
    uuid2 = gpus.gpus[2]["uuid"]

    gpus.xid(2, 79)
    xid = wait_for(lambda: (read_gpus(state_dir).get(uuid2) or {}).get("xid"), 30, 0.1, "the Xid in the evidence")
    time.sleep(max(0.0, xid[0]["at"] + 5 - time.time()))
    on_gpu2.kill()

    def death_of(container):
        deaths = [e["data"] for e in outbox_events(state_dir, "container.die")]
        return next((d for d in deaths if d["container_id"] == container.id), None)

    died = wait_for(lambda: death_of(on_gpu2), 30, 0.1, "the death of the container on GPU 2")
    assert died["gpus"] == [{"index": 2, "uuid": uuid2}]
    assert died["suspected"] == "hardware", died
    xid, verdict = died["evidence"]  # the Xid, and the verdict it caused
    assert (xid["event"], xid["index"], xid["uuid"], xid["code"]) == ("xid", 2, uuid2, 79)
    assert 4 <= xid["before_s"] <= 10, xid
    assert (verdict["event"], verdict["new"], verdict["uuid"]) == ("verdict", "failed", uuid2)

    on_gpu0.kill()
    died = wait_for(lambda: death_of(on_gpu0), 30, 0.1, "the death of the container on GPU 0")
    assert died["gpus"] == [{"index": 0, "uuid": gpus.gpus[0]["uuid"]}]
    assert died["suspected"] == "application" and died["exit_code"] == 137, died
    assert died["last_errors"] == ["ValueError: the prompt is too long"]
    assert "evidence" not in died

    gpus.gpus[3]["nvlink"]["0"]["active"] = 0  # NVLink 0 down: GPU 3 degraded, no Xid
    gpus.write()
    uuid3 = gpus.gpus[3]["uuid"]
    wait_for(lambda: (read_gpus(state_dir).get(uuid3) or {}).get("verdict_change"), 30, 0.1, "GPU 3's verdict change")
    on_gpu3.kill()
    died = wait_for(lambda: death_of(on_gpu3), 30, 0.1, "the death of the container on GPU 3")
    assert died["suspected"] == "hardware", died
    (evidence,) = died["evidence"]
    assert (evidence["event"], evidence["old"], evidence["new"]) == ("verdict", "ok", "degraded")
    assert evidence["reasons"] == ["NVLink 0 down"] and evidence["uuid"] == uuid3
