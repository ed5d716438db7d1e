"""Node conditions from the kernel's lines and the fabric manager, in the real agent against the
real reference backend: lines of a hung task, a machine check and an OOM kill written to a real
journal file (systemd-journal-remote) raise their conditions, a hold in seconds clears by
itself, a boot hold survives a restart of the agent and ends with a new boot id; the /dev/kmsg
fallback through a FIFO; GPUs on the PCI bus that NVML cannot see; a stopped fabric manager (the
systemctl stand-in) on an NVSwitch fabric."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest

from faden_agent.protocol import conditions as names
from tests.nvml.state import GpuState
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import BackendProcess, agent_env_for, backend  # noqa: F401 - the fixture
from tests.support.fakesysfs import FakeSysfs
from tests.support.journalfiles import JournalWriter
from tests.support.kernellog import boot_file, kernel_line, kmsg_record
from tests.support.metricsclient import value_of
from tests.support.nodeconditions import condition_events, held, running, worker_status

pytestmark = pytest.mark.docker

GAUGE = "faden_agent_node_condition"
HUNG = "INFO: task python3:4242 blocked for more than 120 seconds."
MCE = "mce: [Hardware Error]: CPU 1: Machine Check Exception: 5 Bank 4: b200000000070f0f"
SYSTEM_OOM = (
    "Out of memory: Killed process 31337 (vllm) total-vm:1048576kB, anon-rss:524288kB, file-rss:0kB,"
    " shmem-rss:0kB, UID:0 pgtables:2048kB oom_score_adj:0"
)
CGROUP_OOM = "Memory cgroup out of memory: Killed process 9306 (tail) total-vm:34288kB, anon-rss:32128kB"


def changes(backend: BackendProcess, node_id: str, name: str) -> list[tuple[bool | None, bool | None, str | None]]:
    """(old, active, reason) of each node.condition_changed event of `name` at the backend."""
    return [(e["old"], e["active"], e["reason"]) for e in condition_events(backend, node_id, name)]


def kernel_status(agent: AgentProcess) -> dict:
    return worker_status(agent).get("kernel_lines") or {}


def journal_agent_env(
    backend: BackendProcess, tmp_path, boot_id: str, **settings: object
) -> tuple[JournalWriter, dict[str, str]]:
    """A journal of boot `boot_id` with one harmless kernel line, and an agent's settings reading it."""
    journal = JournalWriter(tmp_path / "journal")
    journal.boot_id = boot_id
    kernel_line(journal, "usb 1-1: new high-speed USB device number 2 using xhci_hcd")
    env = agent_env_for(
        backend,
        tmp_path,
        inventory_interval_sec=1,
        journal_directory=journal.directory,
        boot_id_file=boot_file(tmp_path, boot_id),
        **settings,
    )
    return journal, env


def test_kernel_lines_in_the_journal_raise_their_conditions_and_each_hold_ends_as_set(backend, tmp_path):  # noqa: F811
    journal, env = journal_agent_env(backend, tmp_path, "c" * 32, oom_kill_hold_sec=4)
    gpus = GpuState(tmp_path / "nvml", count=2)  # the kernel's lines are read where NVIDIA GPUs are
    env.update(gpus.env())
    with running(env, tmp_path / "agent.log") as agent:
        node_id = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])["node_id"]
        wait_for(lambda: value_of(agent, GAUGE, condition=names.KERNEL_HUNG_TASK) == 0, 30, 0.2, "watched, not held")
        assert kernel_status(agent)["source"] == "journald"
        for text in (HUNG, MCE, CGROUP_OOM, SYSTEM_OOM):
            kernel_line(journal, text)
        hung = wait_for(lambda: changes(backend, node_id, names.KERNEL_HUNG_TASK), 30, 0.2, "the hung task")
        assert hung == [(False, True, "task python3:4242 blocked for more than 120 s")]
        error = wait_for(lambda: changes(backend, node_id, names.HARDWARE_ERROR_UNCORRECTED), 10, 0.2, "the MCE")
        assert error == [
            (False, True, "machine check, uncorrected: CPU 1: Machine Check Exception: 5 Bank 4: b200000000070f0f")
        ]
        # the OOM kill for the whole machine, with its victim; held 4 s (OOM_KILL_HOLD_SEC), then cleared
        oom = wait_for(
            lambda: len(c := changes(backend, node_id, names.OOM_KILL)) == 2 and c, 30, 0.2, "raised, cleared"
        )
        assert oom == [(False, True, "out of memory: the kernel killed vllm (pid 31337)"), (True, False, None)]
        status = kernel_status(agent)
        assert (status["condition_lines"], status["cgroup_oom_kills"]) == (3, 1)  # a cgroup's own: no condition
        assert value_of(agent, GAUGE, condition=names.KERNEL_HUNG_TASK) == 1
        assert held(agent)[names.HARDWARE_ERROR_UNCORRECTED].startswith("machine check, uncorrected")
        assert changes(backend, node_id, names.KERNEL_LOCKUP) == []  # watched, never active: no event
        assert agent.workers()["inventory"]["restarts"] == 0

    # doctor, with the agent stopped, reads the kept lines that hold this boot
    done = subprocess.run(
        [sys.executable, "-m", "faden_agent", "doctor", "--json"], env=env, capture_output=True, text=True, timeout=180
    )
    checks = {c["name"]: c for c in orjson.loads(done.stdout)["checks"]}
    assert checks[names.KERNEL_HUNG_TASK]["status"] == "warn"
    assert checks[names.KERNEL_HUNG_TASK]["detail"] == "task python3:4242 blocked for more than 120 s"
    assert "dmesg" in checks[names.KERNEL_HUNG_TASK]["hint"]
    assert checks[names.OOM_KILL]["status"] == "ok"  # its hold ended

    # a restart of the agent is no reboot: the boot holds go on, no event repeated
    with running(env, tmp_path / "agent-again.log") as agent:
        wait_for(lambda: value_of(agent, GAUGE, condition=names.KERNEL_HUNG_TASK) == 1, 30, 0.2, "held again")
        assert value_of(agent, GAUGE, condition=names.HARDWARE_ERROR_UNCORRECTED) == 1
        wait_for(lambda: agent.workers()["inventory"]["status"]["cycles"] >= 3, 30, 0.2, "three rounds")
        assert len(changes(backend, node_id, names.KERNEL_HUNG_TASK)) == 1

    # the machine rebooted: a new boot id, and this boot's journal has none of those lines
    boot_file(tmp_path, "d" * 32)
    with running(env, tmp_path / "agent-rebooted.log") as agent:
        cleared = wait_for(
            lambda: len(c := changes(backend, node_id, names.HARDWARE_ERROR_UNCORRECTED)) == 2 and c, 30, 0.2, "cleared"
        )
        assert cleared[1] == (True, False, None)
        assert changes(backend, node_id, names.KERNEL_HUNG_TASK)[1] == (True, False, None)
        wait_for(lambda: value_of(agent, GAUGE, condition=names.KERNEL_HUNG_TASK) == 0, 10, 0.2, "gauge 0")


def test_without_a_journal_kmsg_lines_through_a_fifo_raise_and_clear(backend, tmp_path):  # noqa: F811
    no_journal = tmp_path / "no-journal"
    no_journal.mkdir()
    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # a writer that never goes away, as the device
    gpus = GpuState(tmp_path / "nvml", count=1)
    env = agent_env_for(
        backend,
        tmp_path,
        inventory_interval_sec=1,
        journal_directory=no_journal,
        kmsg_path=fifo,
        kernel_lockup_hold_sec=3,
    )
    env.update(gpus.env())
    try:
        with running(env, tmp_path / "agent.log") as agent:
            node_id = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])["node_id"]
            wait_for(lambda: kernel_status(agent).get("source") == "kmsg", 30, 0.2, "the FIFO taken")
            os.write(writer, kmsg_record(1, "watchdog: BUG: soft lockup - CPU#3 stuck for 22s! [python3:4567]"))
            os.write(writer, kmsg_record(2, "EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0"))
            os.write(writer, b"junk without a record's head\n" + b"x" * 70_000 + b"\n")  # skipped, nothing else
            lockup = wait_for(
                lambda: len(c := changes(backend, node_id, names.KERNEL_LOCKUP)) == 2 and c, 30, 0.2, "raised, cleared"
            )
            assert lockup == [(False, True, "soft lockup on CPU 3 (python3:4567)"), (True, False, None)]
            corrected = changes(backend, node_id, names.HARDWARE_ERROR_CORRECTED)
            assert corrected == [
                (False, True, "EDAC MC0: 1 corrected error(s): memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0")
            ]
            assert value_of(agent, GAUGE, condition=names.HARDWARE_ERROR_CORRECTED) == 1  # held 1 h by default
            assert kernel_status(agent)["condition_lines"] == 2
            assert agent.workers()["inventory"]["restarts"] == 0
    finally:
        os.close(writer)


@pytest.mark.parametrize("gpus_on_bus", [2, 0])
def test_gpus_nvml_cannot_see_have_the_kernel_lines_read_and_a_machine_without_none(
    backend,  # noqa: F811
    tmp_path,
    gpus_on_bus,
):
    # A GPU machine whose driver did not load: no NVML library (no fake one here), its GPUs on
    # the PCI bus all the same (sysfs): the kernel's lines, which say why, and the machine's own
    # conditions are read. A machine with no NVIDIA GPU on its bus starts no reader at all.
    sysfs = FakeSysfs(tmp_path / "sysfs", gpus=gpus_on_bus, nics=0)
    journal, env = journal_agent_env(backend, tmp_path, "d" * 32, sysfs_root=sysfs.root)
    with running(env, tmp_path / "agent.log") as agent:
        node_id = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])["node_id"]
        if not gpus_on_bus:
            wait_for(lambda: (worker_status(agent).get("cycles") or 0) >= 3, 30, 0.2, "three rounds")
            kernel_line(journal, HUNG)
            wait_for(lambda: (worker_status(agent).get("cycles") or 0) >= 5, 30, 0.2, "two more rounds")
            assert kernel_status(agent) == {} and names.KERNEL_HUNG_TASK not in held(agent)
            assert backend.inventory(node_id)["inventory"]["topology"]["gpus"] == []
            return
        wait_for(lambda: kernel_status(agent).get("source") == "journald", 30, 0.2, "the kernel's lines read")
        gpu = backend.inventory(node_id)["inventory"]["gpu"]
        assert not gpu.get("available") and not gpu.get("devices")  # NVML saw none
        kernel_line(journal, HUNG)
        hung = wait_for(lambda: changes(backend, node_id, names.KERNEL_HUNG_TASK), 30, 0.2, "the hung task")
        assert hung == [(False, True, "task python3:4242 blocked for more than 120 s")]


def test_no_kernel_log_makes_the_kernel_conditions_unknown(backend, tmp_path):  # noqa: F811
    no_journal = tmp_path / "no-journal"
    no_journal.mkdir()
    missing = tmp_path / "no-kmsg"
    gpus = GpuState(tmp_path / "nvml", count=1)
    env = agent_env_for(backend, tmp_path, inventory_interval_sec=1, journal_directory=no_journal, kmsg_path=missing)
    env.update(gpus.env())
    with running(env, tmp_path / "agent.log") as agent:
        node_id = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])["node_id"]
        wait_for(lambda: value_of(agent, GAUGE, condition=names.OOM_KILL) is None, 30, 0.2, "no sample: unknown")
        inventory = wait_for(
            lambda: (i := backend.inventory(node_id)["inventory"]).get("conditions", {}).get(names.OOM_KILL) and i,
            30,
            0.2,
            "the conditions in the inventory",
        )
        oom = inventory["conditions"][names.OOM_KILL]
        assert oom["active"] is None
        assert oom["reason"] == (
            f"no kernel log: no journal files in {no_journal}; {missing}: No such file or directory:"
            " the kernel's lines not seen"
        )


def test_a_stopped_fabric_manager_raises_fabric_manager_down(backend, tmp_path):  # noqa: F811
    gpus = GpuState(tmp_path / "nvml", count=2)  # H100s on an NVSwitch fabric, its manager running
    env = agent_env_for(backend, tmp_path, inventory_interval_sec=1)
    env.update(gpus.env())
    with running(env, tmp_path / "agent.log") as agent:
        node_id = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])["node_id"]
        wait_for(lambda: value_of(agent, GAUGE, condition=names.FABRIC_MANAGER_DOWN) == 0, 30, 0.2, "running")
        gpus.fabric_manager.update(ActiveState="inactive", SubState="dead")
        gpus.write()
        wait_for(lambda: value_of(agent, GAUGE, condition=names.FABRIC_MANAGER_DOWN) == 1, 30, 0.2, "stopped")
        assert held(agent)[names.FABRIC_MANAGER_DOWN] == "not running (nvidia-fabricmanager: inactive (dead))"
        gpus.fabric_manager.update(ActiveState="active", SubState="running")
        gpus.write()
        both = wait_for(
            lambda: len(c := changes(backend, node_id, names.FABRIC_MANAGER_DOWN)) == 2 and c, 30, 0.2, "cleared"
        )
        assert both == [(False, True, "not running (nvidia-fabricmanager: inactive (dead))"), (True, False, None)]


def test_no_fabric_no_fabric_manager_condition(backend, tmp_path):  # noqa: F811
    gpus = GpuState(tmp_path / "nvml", count=1)
    del gpus.gpus[0]["fabric"]  # NVML: not supported (PCIe GPUs, no NVSwitch)
    gpus.fabric_manager.update(LoadState="not-found")
    gpus.write()
    env = agent_env_for(backend, tmp_path, inventory_interval_sec=1)
    env.update(gpus.env())
    with running(env, tmp_path / "agent.log") as agent:
        node_id = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])["node_id"]
        inventory = wait_for(
            lambda: (i := backend.inventory(node_id)["inventory"]).get("conditions") and i, 30, 0.2, "conditions"
        )
        assert names.FABRIC_MANAGER_DOWN not in inventory["conditions"]
        assert value_of(agent, GAUGE, condition=names.FABRIC_MANAGER_DOWN) is None
