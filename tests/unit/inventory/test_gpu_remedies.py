"""The inventory's remedy jobs as data: what the door refuses before a job starts (another job
running, a GPU it does not know, a time limit out of range, hostile bodies), a job ends once, a
program group an earlier run left is ended at the next start; what blocks a reset of one GPU
alone (NVIDIA's nvidia-smi manual, -r), the processes on a GPU and those holding its device file."""

from __future__ import annotations

import os
import subprocess
import threading
from typing import Any

import pytest

from faden_agent.common.programs import start_time
from faden_agent.node.fabric_manager import FabricManager
from faden_agent.workers.inventory.gpu.remedies import GROUP_FILE, PERSISTENCE_FILE, Remedies
from faden_agent.workers.inventory.gpu.remedy import Job, Tools
from faden_agent.workers.inventory.gpu.resets import device_holders, fabric_block, processes_on
from tests.nvml.state import NVIDIA_SMI, GpuState

DEVICE = {"uuid": "GPU-a", "index": 0, "pci_bus_id": "00000000:17:00.0", "compute_capability": "9.0"}


def tools(section: dict[str, Any] | None = None) -> Tools:
    return Tools(
        probe=None,
        watcher=None,
        section=lambda: section if section is not None else {"devices": [DEVICE]},
        fabric_manager=lambda version: FabricManager(True, "active (running)", version, version),
        dcgmi="/nonexistent/dcgmi",
        nvidia_smi="/nonexistent/nvidia-smi",
        on_change=lambda: None,
        remember_group=lambda pgid: None,
    )


def held_threads() -> tuple[list[tuple], Any]:
    started: list[tuple] = []

    def start_thread(name: str, target: Any, *args: Any, **kinds: Any) -> threading.Thread:
        started.append((name, target, args))
        return threading.current_thread()  # not run: the test looks at the job

    return started, start_thread


def test_the_door_refuses_what_it_cannot_start(tmp_path):
    started, start_thread = held_threads()
    remedies = Remedies(tools(), start_thread, tmp_path)
    for body, said in (
        ({"uuids": ["GPU-a"], "time_limit_s": 0}, "time_limit_s must be"),
        ({"uuids": ["GPU-a"], "time_limit_s": "x"}, "time_limit_s must be"),
        ({"uuids": ["GPU-a"], "time_limit_s": 1e9}, "time_limit_s must be"),
        ({"uuids": ["GPU-b"], "time_limit_s": 5}, "no such GPU here: GPU-b"),
        ({"uuids": "GPU-a", "time_limit_s": 5}, "none asked"),
        ({"uuids": [], "time_limit_s": 5}, "none asked"),
    ):
        answer = remedies.start("gpu.check", body)
        assert (answer["outcome"], answer["job"]) == ("unknown", None) and said in answer["message"], (body, answer)
    for uuid in (5, ["GPU-a"], {"a": 1}, None):
        assert remedies.start("gpu.reset", {"uuid": uuid, "time_limit_s": 5})["outcome"] == "unknown"
    assert started == []

    first = remedies.start("gpu.check", {"uuids": ["GPU-a"], "time_limit_s": 5, "busy": {"GPU-a": ["x"] * 99}})
    assert first["outcome"] == "started"
    second = remedies.start("gpu.reset", {"uuid": "GPU-a", "time_limit_s": 5})
    assert second["outcome"] == "busy" and "one at a time" in second["message"]
    assert remedies.poll(first["job"], 0) == {"state": "running", "steps": [], "next": 0, "end": None}
    assert remedies.poll("nope", 3)["state"] == "unknown"
    assert remedies.cancel(first["job"]) == {"cancelled": True} and remedies.current.stop.is_set()


def test_a_job_ends_once_and_keeps_its_steps_bounded():
    job = Job("j", "gpu.check", 10)
    for n in range(3000):
        job.step("test", n=n)
    assert len(job.steps_since(0)) == 2000 and job.steps_since(1999) == [{"phase": "test", "n": 1999}]
    job.finish(False, "timeout", "first")
    job.finish(True, "ok", "second")
    assert job.end == {"ok": False, "reason": "timeout", "message": "first", "result": {}} and job.done


def test_a_program_group_left_by_a_killed_worker_is_ended_at_the_next_start(tmp_path):
    left = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        (tmp_path / GROUP_FILE).write_text(f"{left.pid} {start_time(left.pid)}\n")
        remedies = Remedies(tools(), held_threads()[1], tmp_path)
        assert remedies.leftover == left.pid
        left.wait(5)
        assert not (tmp_path / GROUP_FILE).exists()
        (tmp_path / GROUP_FILE).write_text("junk\n")  # a file that is no group: removed, nothing ended
        assert Remedies(tools(), held_threads()[1], tmp_path).leftover is None
        assert not (tmp_path / GROUP_FILE).exists()
    finally:
        if left.poll() is None:
            left.kill()
            left.wait()


@pytest.mark.parametrize(
    "capability, links, on_switch, manager_active, blocked",
    [
        ("9.0", [True], True, False, None),  # Hopper: each GPU alone, fabric manager or not
        ("8.0", [True], True, True, None),  # Ampere NVSwitch with the fabric manager running
        ("8.0", [True], True, False, "fabric manager runs"),
        ("8.0", [True], False, False, None),  # Ampere, NVLink without NVSwitch: alone
        ("7.0", [True, False], False, True, "before Ampere with NVLink peers"),
        ("7.0", [False], False, True, None),  # no link up: no peers
        (None, [True], True, False, None),  # unknown: tried, nvidia-smi says
    ],
)
def test_what_blocks_a_reset_of_one_gpu_alone(capability, links, on_switch, manager_active, blocked):
    device = {
        "compute_capability": capability,
        "health": {"nvlink": {"links": [{"link": n, "active": a} for n, a in enumerate(links)]}, "fabric": None},
    }
    section = {"devices": [device], "nvswitches": [{"pci_bus_id": "0000:c1:00", "sxid": []}] if on_switch else []}
    manager = FabricManager(manager_active, "active (running)" if manager_active else "inactive (dead)", None, None)
    said = fabric_block(device, section, lambda version: manager)
    assert (said is None) if blocked is None else (blocked in said), said


def test_the_processes_on_a_gpu_and_the_holders_of_its_device_file(tmp_path):
    device = {"processes": [{"pid": 7, "name": "python3", "container_id": "c" * 64}, {"pid": 8, "name": None}]}
    assert processes_on(device) == f"pid 7 (python3, container {'c' * 12}), pid 8 (?, outside any container)"
    assert processes_on({}) == ""
    proc = tmp_path / "proc"
    for pid, target, comm in (
        ("11", "/dev/nvidia1", "nv-hostengine"),
        ("12", "/dev/nvidia10", "x"),
        ("13", "/dev/null", "y"),
    ):
        (proc / pid / "fd").mkdir(parents=True)
        (proc / pid / "fd" / "3").symlink_to(target)
        (proc / pid / "comm").write_text(comm + "\n")
    (proc / "self").mkdir()
    (proc / str(os.getpid()) / "fd").mkdir(parents=True)
    (proc / str(os.getpid()) / "fd" / "4").symlink_to("/dev/nvidia1")
    held = device_holders(1, str(proc))
    assert set(held.split(", ")) == {"pid 11 (nv-hostengine)", f"pid {os.getpid()} (?) (this agent)"}
    assert device_holders(None, str(proc)) == "" and device_holders(1, str(tmp_path / "none")) == ""


def test_persistence_mode_a_killed_reset_left_off_is_turned_on_at_the_next_start(tmp_path, monkeypatch):
    gpus = GpuState(tmp_path / "nvml", count=2)
    gpus.gpus[1]["persistence"] = 0  # turned off by a reset whose worker was killed
    gpus.write()
    (tmp_path / PERSISTENCE_FILE).write_text(f"{gpus.gpus[1]['bus_id']}\n")
    started: list[threading.Thread] = []

    def start_thread(name: str, target: Any, *args: Any, **kinds: Any) -> threading.Thread:
        started.append(threading.Thread(target=target, args=args))
        started[-1].start()
        return started[-1]

    base = tools()
    given = {**{name: getattr(base, name) for name in Tools.__slots__}, "nvidia_smi": str(NVIDIA_SMI)}
    for key, value in gpus.env().items():
        monkeypatch.setenv(key, value)  # what nvidia-smi is started with
    remedies = Remedies(Tools(**given), start_thread, tmp_path)
    assert remedies.restoring == gpus.gpus[1]["bus_id"]
    started[0].join(30)
    gpus.read_back()
    assert gpus.gpus[1]["persistence"] == 1 and not (tmp_path / PERSISTENCE_FILE).exists()
    (tmp_path / PERSISTENCE_FILE).write_text("; rm -rf /\n")  # not a bus id: dropped, nothing run
    assert Remedies(Tools(**given), start_thread, tmp_path).restoring is None
    assert not (tmp_path / PERSISTENCE_FILE).exists() and len(started) == 1
