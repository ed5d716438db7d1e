"""Deaths with their cause by the Xid catalogue, in a real agent (inventory + executor workers,
the C-level NVML, the real Docker engine): a container killed 5 s after an Xid 79 on its GPU is
`hardware`, one whose killing Xid comes a moment after its death too; an OOM 0.4 s after an
Xid 45 and a death after an application's Xid 31 are `application`, those Xids listed; a
container given every GPU implicates only those NVML saw its processes on; a turn to degraded
is no cause; the last stderr lines arrive without escapes and secrets."""

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

    def run(gpus: str, command: str, **options):
        container = docker_client.containers.run(
            TEST_IMAGE,
            ["sh", "-c", command],
            name=f"faden-i48-death-{uuid.uuid4().hex[:8]}",
            labels={protocol.LABEL_MANAGED: "true"},
            environment={"NVIDIA_VISIBLE_DEVICES": gpus},
            detach=True,
            **options,
        )
        started.append(container)
        return container

    yield run
    for container in started:
        container.remove(force=True)


def start_agent(tmp_path, agent_factory, count: int) -> tuple[GpuState, object]:
    gpus = GpuState(tmp_path / "nvml", count=count)
    env = agent_env(tmp_path, inventory_interval_sec=1, workload_fault_window_sec=60)
    env.update(gpus.env())
    agent_factory(env, argv=WORKERS).start()
    state_dir = tmp_path / "state"
    wait_for(lambda: len(read_gpus(state_dir)) == count, 30, 0.2, "the inventory's GPU evidence")
    return gpus, state_dir


def death_of(state_dir, container, kind: str = "container.die"):
    deaths = [e["data"] for e in outbox_events(state_dir, kind)]
    return next((d for d in deaths if d["container_id"] == container.id), None)


def test_a_gpu_fault_on_its_gpu_is_hardware_before_or_just_after_the_death(tmp_path, agent_factory, on_gpu):
    gpus, state_dir = start_agent(tmp_path, agent_factory, 4)
    on_gpu2 = on_gpu("2", "echo 'CUDA error: an illegal memory access was encountered' >&2; exec sleep 600")
    on_gpu0 = on_gpu("0", "echo 'ValueError: the prompt is too long' >&2; exec sleep 600")
    on_gpu3 = on_gpu("3", "echo 'NCCL error: unhandled system error' >&2; exec sleep 600")
    on_gpu1 = on_gpu("1", "exec sleep 600")
    uuid2 = gpus.gpus[2]["uuid"]

    gpus.xid(2, 79)
    xid = wait_for(lambda: (read_gpus(state_dir).get(uuid2) or {}).get("xid"), 30, 0.1, "the Xid in the evidence")
    time.sleep(max(0.0, xid[0]["at"] + 5 - time.time()))
    on_gpu2.kill()
    died = wait_for(lambda: death_of(state_dir, on_gpu2), 30, 0.1, "the death of the container on GPU 2")
    assert (died["gpus"], died["gpus_from"]) == ([{"index": 2, "uuid": uuid2}], "device_ids")
    assert (died["suspected"], died["rule"]) == ("hardware", "gpu_fault"), died
    xid_seen, verdict = died["evidence"]  # the Xid, and the turn to failed it caused
    assert (xid_seen["event"], xid_seen["index"], xid_seen["uuid"], xid_seen["code"]) == ("xid", 2, uuid2, 79)
    assert 4 <= xid_seen["before_s"] <= 10, xid_seen
    assert (verdict["event"], verdict["new"], verdict["uuid"]) == ("verdict", "failed", uuid2)

    on_gpu0.kill()
    died = wait_for(lambda: death_of(state_dir, on_gpu0), 30, 0.1, "the death of the container on GPU 0")
    assert died["gpus"] == [{"index": 0, "uuid": gpus.gpus[0]["uuid"]}]
    assert (died["suspected"], died["rule"], died["exit_code"]) == ("application", "no_gpu_fault", 137), died
    assert died["last_errors"] == ["ValueError: the prompt is too long"] and "evidence" not in died

    # the fatal Xid that killed it is logged a moment after the death: the window waits for it
    on_gpu1.kill()
    gpus.double_bit_error(1)
    died = wait_for(lambda: death_of(state_dir, on_gpu1), 30, 0.1, "the death of the container on GPU 1")
    assert (died["suspected"], died["rule"]) == ("hardware", "gpu_fault"), died
    assert {e["code"] for e in died["evidence"] if e["event"] == "xid"} == {48}
    assert min(e["before_s"] for e in died["evidence"]) < 0  # after the death

    gpus.gpus[3]["nvlink"]["0"]["active"] = 0  # NVLink 0 down: GPU 3 degraded, no Xid
    gpus.write()
    uuid3 = gpus.gpus[3]["uuid"]
    wait_for(lambda: (read_gpus(state_dir).get(uuid3) or {}).get("verdict_change"), 30, 0.1, "GPU 3's verdict change")
    on_gpu3.kill()
    died = wait_for(lambda: death_of(state_dir, on_gpu3), 30, 0.1, "the death of the container on GPU 3")
    assert (died["suspected"], died["rule"]) == ("application", "no_gpu_fault"), died  # degraded is no cause


def test_an_oom_and_an_application_xid_after_an_xid_45_are_the_application_s(tmp_path, agent_factory, on_gpu):
    gpus, state_dir = start_agent(tmp_path, agent_factory, 2)
    ready = "echo ready; exec sleep 600"
    hog = on_gpu("0", "sleep 2; head -c 300m /dev/zero | tail", mem_limit="32m")  # tail keeps the one long line
    crasher = on_gpu("0", "echo '\x1b[31mRuntimeError\x1b[0m: CUDA error: an illegal memory access' >&2; " + ready)
    gpus.xid(0, 45)  # the driver's cleanup after a killed process, on GPU 0
    died = wait_for(lambda: death_of(state_dir, hog, "container.oom"), 40, 0.1, "the OOM of the hog")
    assert (died["suspected"], died["rule"]) == ("application", "application_xids"), died
    assert [(x["code"], x["nvidia"]) for x in died["xids"]] == [(45, "WORKFLOW_XID_45")]
    assert "evidence" not in died

    gpus.xid(0, 31)  # a memory page fault: the application's own
    time.sleep(3)
    crasher.kill()
    died = wait_for(lambda: death_of(state_dir, crasher), 30, 0.1, "the crasher's death")
    assert (died["suspected"], died["rule"]) == ("application", "application_xids"), died
    assert [x["code"] for x in died["xids"]] == [45, 31]
    assert died["last_errors"] == ["RuntimeError: CUDA error: an illegal memory access"]


def test_a_container_given_every_gpu_implicates_only_those_its_processes_ran_on(tmp_path, agent_factory, on_gpu):
    gpus, state_dir = start_agent(tmp_path, agent_factory, 4)
    everywhere = on_gpu("all", "exec sleep 600")
    pid = everywhere.attrs["State"]["Pid"] or everywhere.client.api.inspect_container(everywhere.id)["State"]["Pid"]
    gpus.gpus[1]["compute"] = {"count": 1, "0": {"pid": pid, "used": 1 << 30}}  # NVML lists it on GPU 1 only
    gpus.write()
    uuid1 = gpus.gpus[1]["uuid"]
    wait_for(
        lambda: everywhere.id in ((read_gpus(state_dir).get(uuid1) or {}).get("containers") or {}),
        30,
        0.1,
        "the container seen on GPU 1",
    )
    gpus.xid(3, 79)  # another GPU's fault: not this container's
    wait_for(lambda: (read_gpus(state_dir).get(gpus.gpus[3]["uuid"]) or {}).get("xid"), 30, 0.1, "GPU 3's Xid")
    everywhere.kill()
    died = wait_for(lambda: death_of(state_dir, everywhere), 30, 0.1, "the death of the container on all GPUs")
    assert (died["gpus"], died["gpus_from"]) == ([{"index": 1, "uuid": uuid1}], "processes")
    assert (died["suspected"], died["rule"]) == ("application", "no_gpu_fault"), died


def test_the_last_errors_lose_escapes_and_secrets(tmp_path, agent_factory, on_gpu):
    gpus, state_dir = start_agent(tmp_path, agent_factory, 1)
    lines = [
        r"printf '\033[1;31mFATAL\033[0m \033]0;pwned\007loading\n' >&2",
        "echo 'export AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE"
        " AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENGbPxRfiCYEXAMPLEKEY' >&2",
        "echo 'login with token hf_abcdefghijklmnopqrstuvwxyzABCDEFGH failed' >&2",
        "echo 'pip: https://alice:s3cr3t@pypi.example/simple refused' >&2",
        "exit 3",
    ]
    dying = on_gpu("0", "; ".join(lines))
    died = wait_for(lambda: death_of(state_dir, dying), 30, 0.1, "the death")
    assert died["exit_code"] == 3 and died["last_errors"] == [
        "FATAL loading",
        "export AWS_ACCESS_KEY_ID=<redacted> AWS_SECRET_ACCESS_KEY=<redacted>",
        "login with token <redacted> failed",
        "pip: https://<redacted>@pypi.example/simple refused",
    ]
