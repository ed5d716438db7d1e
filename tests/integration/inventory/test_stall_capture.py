"""Evidence at a stall in a real agent (inventory and log workers, a real Loki 3.4.6, the C
NVML): a Python serving container (tests/support/stalling_engine.py in the project's Python
image, as uid 1000) stops making progress inside wait_for_collective(); the workload.stalled
event names that function, the capture (stacks, GPU state with its Xid, last lines) is one
Loki entry with the event's id, once. Without CAP_SYS_PTRACE it says it cannot attach."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from pathlib import Path

import pytest

from faden_agent import protocol
from faden_agent.node import captures
from tests.nvml.state import GiB, GpuState
from tests.support.agentproc import agent_env, wait_for
from tests.support.lokiproc import loki_3  # noqa: F401
from tests.support.newcomer import python_image
from tests.support.outboxevents import outbox_events
from tests.support.sampleworkers import supervisor_argv

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

ENGINE = Path(__file__).resolve().parents[2] / "support" / "stalling_engine.py"
WORKERS = supervisor_argv(
    {
        "inventory": "faden_agent.workers.inventory.worker:InventoryWorker",
        "logs": "faden_agent.workers.logs.worker:LogsWorker",
    }
)
SCRAPE_S, STALL_S = 1, 3


@pytest.fixture(scope="module")
def image():
    return python_image()


@pytest.fixture
def engine(docker_client, image, tmp_path):
    """start() -> (container, its control directory): the stalling engine as uid 1000 on GPU 0."""
    started = []

    def start():
        control = tmp_path / f"control-{len(started)}"
        control.mkdir()
        container = docker_client.containers.run(
            image,
            ["python3", "/engine.py"],
            name=f"faden-i51-engine-{uuid.uuid4().hex[:8]}",
            user="1000",
            labels={
                protocol.LABEL_MANAGED: "true",
                protocol.LABEL_METRICS_PORT: "8000",
                protocol.LABEL_CLUSTER: "c51",
                protocol.LABEL_WORKLOAD: "llama",
            },
            environment={"NVIDIA_VISIBLE_DEVICES": "0"},
            volumes={
                str(ENGINE): {"bind": "/engine.py", "mode": "ro"},
                str(control): {"bind": "/control", "mode": "ro"},
            },
            detach=True,
        )
        started.append(container)
        container.reload()
        return container, control

    yield start
    for container in started:
        container.remove(force=True)


def start_agent(agent_factory, tmp_path, loki, container, prefix=(), workers=WORKERS, **overrides):
    """The agent (its command after `prefix`) with GPU 0 running the engine's process, GPU 1 idle."""
    gpus = GpuState(tmp_path / "nvml", count=2)
    gpus.gpus[0]["compute"] = {"count": 1, "0": {"pid": container.attrs["State"]["Pid"], "used": 30 * GiB}}
    gpus.write()
    agent_id = f"i51-{uuid.uuid4().hex[:8]}"
    env = agent_env(
        tmp_path,
        agent_id=agent_id,
        loki_url=loki.url,
        workload_scrape_sec=SCRAPE_S,
        workload_stall_sec=STALL_S,
        log_flush_interval_sec=1,
        # the default: a stalled engine spins a core, and on a loaded machine a worker's
        # liveness may lag past the tests' 2 s (a restart forgets the stall: a second one)
        worker_hang_timeout_sec=10,
        **overrides,
    )
    env.update(gpus.env())
    agent = agent_factory(env, argv=[*prefix, *workers]).start()
    return agent, gpus, agent_id


def inventory_status(agent) -> dict:
    return (agent.workers().get("inventory") or {}).get("status") or {}


def scraped(agent, name):
    containers = (inventory_status(agent).get("workloads") or {}).get("containers") or {}
    return containers.get(name, {}).get("scrape") == "ok"


def stalled_event(state_dir, name, timeout_s=60):
    def found():
        return [e["data"] for e in outbox_events(state_dir, "workload.stalled") if e["data"]["name"] == name]

    (event,) = wait_for(found, timeout_s, 0.2, "the workload.stalled event")
    return event


def captures_in_loki(loki, agent_id, container):
    """Of this container only: the agent captures the other tests' engines too (one engine)."""
    return loki.entries(f'{{agent_id="{agent_id}", source="capture", container="{container.name}"}}')


def stall(agent, gpus, control, container):
    """Stall the engine after its GPU had an Xid 94 (contained ECC error)."""
    wait_for(lambda: scraped(agent, container.name), 60, 0.2, "the engine's metrics scraped")
    gpus.xid(0, 94)
    time.sleep(2 * SCRAPE_S)  # moving counters first: no stall yet
    (control / "stall").write_text("")


def test_a_stalled_engine_leaves_its_stacks_gpus_and_lines_in_loki_once(tmp_path, agent_factory, loki_3, engine):  # noqa: F811
    container, control = engine()
    agent, gpus, agent_id = start_agent(agent_factory, tmp_path, loki_3, container)
    stall(agent, gpus, control, container)
    event = stalled_event(tmp_path / "state", container.name)

    summary = event["capture"]
    assert summary["stacks"] == "ok", summary
    assert summary["top_frames"][0].startswith("wait_for_collective (engine.py:"), summary
    assert summary["top_frames"][1].startswith("engine_step (engine.py:")
    assert summary["thread"] == "MainThread" and summary["pid"] == container.attrs["State"]["Pid"]
    assert summary["gpus"] == [{"index": 0, "uuid": gpus.gpus[0]["uuid"], "verdict": "degraded"}]
    print("summary in the event:", json.dumps(summary))

    (entry,) = wait_for(lambda: captures_in_loki(loki_3, agent_id, container), 30, 0.5, "the capture in Loki")
    labels, _, line = entry
    assert (labels["container"], labels["cluster"], labels["workload"]) == (container.name, "c51", "llama")
    assert labels["level"] == "warning" and labels["job"] == "node-agent"
    capture = json.loads(line)
    assert capture["capture_id"] == summary["id"] and capture["trigger"] == "workload.stalled"
    assert capture["container"]["id"] == container.id
    (process,) = capture["stacks"]["processes"]
    assert process["status"] == "ok" and process["comm"] == "python3"
    threads = {thread["name"]: thread for thread in process["threads"]}
    assert threads["MainThread"]["frames"][0].startswith("wait_for_collective")
    assert "metrics-server" in threads  # every thread, not only the busy one
    (gpu,) = capture["gpus"]
    assert gpu["index"] == 0 and gpu["verdict"] == "degraded" and [x["code"] for x in gpu["xids"]] == [94]
    assert gpu["processes"][0]["pid"] == container.attrs["State"]["Pid"]
    assert gpu["processes"][0]["container_id"] == container.id[:12]
    assert gpu["usage"]["utilization_gpu"] == 37 and "clock_events_s" in gpu
    assert capture["gpu_probe"]["fresh"] is True
    assert any("entering the all-reduce" in line for line in capture["logs"]["lines"]), capture["logs"]
    assert len(line.encode()) <= 49152

    time.sleep(4 * SCRAPE_S + 2)  # more rounds of the same stall: no second capture
    assert len(captures_in_loki(loki_3, agent_id, container)) == 1
    assert captures.taken(tmp_path / "state").count(summary["id"]) == 1
    status = inventory_status(agent)["captures"]
    assert status["taken"] >= 1 and status["last"]["error"] is None
    print("last capture took", status["last"]["seconds"], "s,", status["last"]["bytes"], "bytes")
    wait_for(lambda: captures.waiting(tmp_path / "state") == [], 20, 0.5, "the shipped capture removed")
    assert agent.workers()["inventory"]["restarts"] == 0 and agent.workers()["logs"]["restarts"] == 0


def test_without_ptrace_the_capture_says_so_and_keeps_the_rest(tmp_path, agent_factory, loki_3, engine):  # noqa: F811
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) runs the agent without CAP_SYS_PTRACE"
    container, control = engine()
    no_ptrace = [setpriv, "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace", "--"]
    agent, gpus, agent_id = start_agent(agent_factory, tmp_path, loki_3, container, no_ptrace)
    stall(agent, gpus, control, container)
    event = stalled_event(tmp_path / "state", container.name)

    summary = event["capture"]
    assert summary["stacks"] == "cannot_attach", summary
    assert "Permission denied" in summary["reason"] and summary["top_frames"] == []
    assert summary["gpus"] == [{"index": 0, "uuid": gpus.gpus[0]["uuid"], "verdict": "degraded"}]

    (entry,) = wait_for(lambda: captures_in_loki(loki_3, agent_id, container), 30, 0.5, "the capture in Loki")
    capture = json.loads(entry[2])
    assert capture["capture_id"] == summary["id"]
    assert agent.workers()["inventory"]["restarts"] == 0
    assert capture["stacks"]["status"] == "cannot_attach"
    assert capture["stacks"]["processes"][0]["status"] == "cannot_attach"
    assert [x["code"] for x in capture["gpus"][0]["xids"]] == [94]  # everything else is kept
    assert any("entering the all-reduce" in line for line in capture["logs"]["lines"])


def test_a_serving_container_dying_of_a_hardware_cause_is_captured(tmp_path, agent_factory, loki_3, engine):  # noqa: F811
    container, _ = engine()
    workers = supervisor_argv(
        {
            "inventory": "faden_agent.workers.inventory.worker:InventoryWorker",
            "executor": "faden_agent.workers.executor.worker:ExecutorWorker",
            "logs": "faden_agent.workers.logs.worker:LogsWorker",
        }
    )
    fast = {"inventory_interval_sec": 1, "workload_fault_window_sec": 60}
    agent, gpus, agent_id = start_agent(agent_factory, tmp_path, loki_3, container, workers=workers, **fast)
    state_dir = tmp_path / "state"
    wait_for(lambda: scraped(agent, container.name), 60, 0.2, "the engine's metrics scraped")
    gpus.xid(0, 79)  # fallen off the bus

    def gpu0_verdict():
        devices = ((inventory_status(agent).get("gauges") or {}).get("gpu") or {}).get("devices") or [{}]
        return devices[0].get("verdict")

    wait_for(lambda: gpu0_verdict() == "failed", 30, 0.2, "GPU 0 failed")
    container.kill()

    def death():
        deaths = [e["data"] for e in outbox_events(state_dir, "container.die")]
        return next((d for d in deaths if d["container_id"] == container.id), None)

    died = wait_for(death, 30, 0.2, "the death")
    assert died["suspected"] == "hardware", died
    summary = died["capture"]
    assert summary["id"] and summary["stacks"] == "no_process", summary
    assert summary["gpus"] == [{"index": 0, "uuid": gpus.gpus[0]["uuid"], "verdict": "failed"}]

    (entry,) = wait_for(lambda: captures_in_loki(loki_3, agent_id, container), 30, 0.5, "the capture in Loki")
    capture = json.loads(entry[2])
    assert capture["capture_id"] == summary["id"] and capture["trigger"] == "container.die"
    assert capture["stacks"]["status"] == "no_process"
    assert 79 in [x["code"] for x in capture["gpus"][0]["xids"]]
    assert any("serving metrics" in line for line in capture["logs"]["lines"])  # the dead container's last lines
