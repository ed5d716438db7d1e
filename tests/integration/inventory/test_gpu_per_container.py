"""GPU use per container in a real inventory worker: the C-level NVML (tests/nvml) reports
processes whose pids are real processes in cgroups, one per layout: a real container's own
process (this engine: cgroup v1, cgroupfs driver, `/docker/<id>`) and a process the test
moves into a cgroup v2 it mounts, named the systemd driver's way (`docker-<id>.scope`). Each
container's memory (and SM share where sampled) per GPU is in the inventory's usage and in
/metrics labelled by container name and GPU uuid."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from faden_agent import protocol
from tests.conftest import TEST_IMAGE
from tests.nvml.state import GiB, GpuState
from tests.support.agentproc import agent_env, wait_for
from tests.support.metricsclient import get
from tests.support.outboxevents import outbox_rows
from tests.support.sampleworkers import supervisor_argv

pytestmark = pytest.mark.docker

INVENTORY_ONLY = supervisor_argv({"inventory": "faden_agent.workers.inventory.worker:InventoryWorker"})


@pytest.fixture
def managed(docker_client):
    started = []

    def run():
        name = f"faden-i43-gpu-{uuid.uuid4().hex[:8]}"
        labels = {protocol.LABEL_MANAGED: "true"}
        container = docker_client.containers.run(TEST_IMAGE, ["sleep", "600"], name=name, labels=labels, detach=True)
        started.append(container)
        container.reload()
        return container

    yield run
    for container in started:
        container.remove(force=True)


@pytest.fixture
def systemd_scope(tmp_path):
    """scope(container_id) -> the pid of a process in <cgroup2>/system.slice/docker-<id>.scope."""
    mountpoint = tmp_path / "cgroup2"
    mountpoint.mkdir()
    subprocess.run(["mount", "-t", "cgroup2", "none", str(mountpoint)], check=True)
    made = []

    def scope(container_id):
        directory = mountpoint / "i43" / "system.slice" / f"docker-{container_id}.scope"
        directory.mkdir(parents=True)
        process = subprocess.Popen(["sleep", "600"])
        (directory / "cgroup.procs").write_text(str(process.pid))
        made.append((process, directory))
        return process.pid

    yield scope
    for process, directory in made:
        process.kill()
        process.wait()
        for cgroup in (directory, directory.parent, directory.parent.parent):
            cgroup.rmdir()
    subprocess.run(["umount", str(mountpoint)], check=False)


def test_gpu_memory_and_utilisation_per_container(tmp_path, agent_factory, managed, systemd_scope):
    cgroupfs, systemd = managed(), managed()
    cgroupfs_pid = cgroupfs.attrs["State"]["Pid"]
    assert f"/docker/{cgroupfs.id}" in open(f"/proc/{cgroupfs_pid}/cgroup").read()  # v1, cgroupfs: real
    systemd_pid = systemd_scope(systemd.id)
    gpus = GpuState(tmp_path / "nvml", count=3)
    gpus.gpus[0]["compute"] = {"count": 2, "0": {"pid": cgroupfs_pid, "used": 3 * GiB}, "1": {"pid": 1, "used": GiB}}
    gpus.gpus[0]["util"] = {"count": 1, "0": {"pid": cgroupfs_pid, "sm": 55, "mem": 20}}
    gpus.gpus[2]["graphics"] = {"count": 1, "0": {"pid": systemd_pid, "used": 2 * GiB}}
    gpus.gpus[2]["compute"] = {"count": 1, "0": {"pid": cgroupfs_pid, "used": GiB}}
    gpus.write()
    env = agent_env(tmp_path, inventory_interval_sec=1)
    env.update(gpus.env())
    agent = agent_factory(env, argv=INVENTORY_ONLY).start()
    uuid0, uuid2 = gpus.gpus[0]["uuid"], gpus.gpus[2]["uuid"]

    def per_container():
        gauges = ((agent.workers().get("inventory") or {}).get("status") or {}).get("gauges") or {}
        found = {(g["container"], g["index"]): g for g in gauges.get("containers_gpu") or []}
        return found if len(found) == 3 else None

    found = wait_for(per_container, 30, 0.2, "GPU use of both containers")
    assert found[(cgroupfs.name, 0)] == {
        "container": cgroupfs.name,
        "index": 0,
        "uuid": uuid0,
        "used_memory": 3 * GiB,  # pid 1 (no container) is not counted
        "utilization_sm": 55,
    }
    assert found[(cgroupfs.name, 2)]["used_memory"] == GiB and "utilization_sm" not in found[(cgroupfs.name, 2)]
    assert found[(systemd.name, 2)]["used_memory"] == 2 * GiB

    def in_record():  # the inventory's usage: docker.containers[].usage.gpus of a full record
        for row in reversed(outbox_rows(tmp_path / "state", protocol.INVENTORY)):
            containers = {c["name"]: c for c in (row.get("docker") or {}).get("containers") or []}
            if (containers.get(systemd.name) or {}).get("usage"):
                return containers
        return None

    containers = wait_for(in_record, 30, 0.2, "a full record with the containers' GPU use")
    assert containers[systemd.name]["usage"]["gpus"] == [
        {"index": 2, "uuid": uuid2, "used_memory": 2 * GiB, "utilization_sm": None}
    ]

    scrape = get(agent)
    memory = "faden_agent_container_gpu_memory_used_bytes"
    assert scrape.value(memory, container=cgroupfs.name, uuid=uuid0, gpu="0") == 3 * GiB
    assert scrape.value(memory, container=systemd.name, uuid=uuid2, gpu="2") == 2 * GiB
    assert scrape.value("faden_agent_container_gpu_utilization_ratio", container=cgroupfs.name, uuid=uuid0) == 0.55
    assert agent.workers()["inventory"]["restarts"] == 0
