"""Node conditions in the real agent against the real reference backend: each one raised and
cleared, as an event at the backend, a gauge in /metrics and the worker's status (ps, heartbeats).
Real parts where they exist here: a tmpfs under the state directory with a read-only bind stacked
on it, an ext4 loop device the kernel itself remounts read-only after an error, adjtimex(2) beside
the clock status file, a process named nvidia-persistenced; a fake sysfs tree for the RDMA ports."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from faden_agent.protocol import conditions as names
from tests.nvml.state import GpuState
from tests.support.agentproc import agent_env, wait_for
from tests.support.backendproc import BackendProcess, agent_env_for, backend  # noqa: F401 - the fixture
from tests.support.fakesysfs import FakeSysfs
from tests.support.metricsclient import value_of
from tests.support.nodeconditions import condition_events, held, running

GAUGE = "faden_agent_node_condition"
SYNCED = "status: 8193\nmaxerror: 4000\n"  # adjtimex --print's lines: PLL | NANO, 4 ms
UNSYNCED = "status: 64\nmaxerror: 16000000\n"  # STA_UNSYNC, the kernel's 16 s cap


def mount(*args: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting needs root")
    subprocess.run(["mount", *args], check=True, capture_output=True, timeout=30)


def umount(path: Path) -> None:
    subprocess.run(["umount", str(path)], capture_output=True, timeout=30)


def raised_then_cleared(backend: BackendProcess, node_id: str, name: str, timeout_s: float = 30) -> list[dict]:
    def both() -> list[dict] | None:
        got = condition_events(backend, node_id, name)
        return got if [e["active"] for e in got] == [True, False] else None

    return wait_for(both, timeout_s, 0.2, f"{name} raised, then cleared, at the backend")


def test_the_state_directory_read_only_is_raised_and_cleared(backend, tmp_path):  # noqa: F811
    statefs = tmp_path / "statefs"
    statefs.mkdir()
    mount("-t", "tmpfs", "-o", "size=64m,mode=0700", "fxstate", str(statefs))
    env = agent_env_for(backend, tmp_path, inventory_interval_sec=1, state_path=statefs / "state.json")
    try:
        with running(env, tmp_path / "agent.log") as agent:
            node_id = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])["node_id"]
            wait_for(lambda: value_of(agent, GAUGE, condition=names.FILESYSTEM_READ_ONLY) == 0, 30, 0.2, "gauge 0")
            # A read-only bind stacked on the state directory: every new write there fails
            # (EROFS), as after a remount; the files the agent holds open stay writable.
            mount("--bind", "-o", "ro", str(statefs), str(statefs))
            wait_for(lambda: value_of(agent, GAUGE, condition=names.FILESYSTEM_READ_ONLY) == 1, 30, 0.2, "gauge 1")
            assert held(agent)[names.FILESYSTEM_READ_ONLY] == f"read-only: {statefs} (state) on {statefs}"
            # the heartbeat carries it: the one report that needs no file in the state directory
            wait_for(
                lambda: names.FILESYSTEM_READ_ONLY in inventory_status(backend, env)["conditions"], 30, 0.2, "beat"
            )
            inventory = wait_for(
                lambda: (
                    (i := backend.inventory(node_id)["inventory"])["conditions"][names.FILESYSTEM_READ_ONLY]["active"]
                    and i
                ),
                30,
                0.2,
                "the condition in the inventory",
            )
            disk = next(d for d in inventory["disks"] if "state" in d.get("roles", []))
            assert disk["read_only"] is True and disk["mountpoint"] == str(statefs)
            umount(statefs)  # the bind goes: the tmpfs below is writable again
            raised, cleared = raised_then_cleared(backend, node_id, names.FILESYSTEM_READ_ONLY)
            assert raised["reason"] == f"read-only: {statefs} (state) on {statefs}" and raised["old"] is False
            assert cleared["old"] is True and cleared["since"] > raised["since"]
            wait_for(lambda: value_of(agent, GAUGE, condition=names.FILESYSTEM_READ_ONLY) == 0, 10, 0.2, "gauge 0")
            assert agent.workers()["inventory"]["restarts"] == 0
    finally:
        umount(statefs)
        umount(statefs)


def inventory_status(backend: BackendProcess, env: dict[str, str]) -> dict:
    """The inventory worker's status as the backend holds it from the heartbeats."""
    node = backend.node_by_agent(env["FADEN_NODE_AGENT_AGENT_ID"]) or {}
    row = next((w for w in node.get("workers") or [] if w.get("name") == "inventory"), {})
    return {"conditions": {}, **(row.get("status") or {})}


def test_a_disk_path_the_kernel_remounts_read_only_after_an_error(backend, tmp_path):  # noqa: F811
    """ext4 with errors=remount-ro on a loop device; the kernel's own error path stops writes
    (on this kernel as `emergency_ro`, without ST_RDONLY). Cleared once mounted afresh."""
    if not (shutil.which("mkfs.ext4") and shutil.which("e2fsck")):
        pytest.skip("no e2fsprogs (mkfs.ext4, e2fsck) to make an ext4 file system with")
    image, data = tmp_path / "data.img", tmp_path / "data"
    data.mkdir()
    subprocess.run(["truncate", "-s", "32M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True, timeout=60)
    mount("-o", "loop,errors=remount-ro", str(image), str(data))
    try:
        device = Path(
            next(line.split()[0] for line in Path("/proc/mounts").read_text().splitlines() if f" {data} " in line)
        )
        trigger = Path("/sys/fs/ext4") / device.name / "trigger_fs_error"
        if not trigger.exists():
            pytest.skip(f"this kernel has no {trigger} to make an ext4 error with")
        env = agent_env_for(backend, tmp_path, inventory_interval_sec=1, disk_paths=str(data))
        with running(env, tmp_path / "agent.log") as agent:
            node_id = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])["node_id"]
            wait_for(lambda: value_of(agent, GAUGE, condition=names.FILESYSTEM_READ_ONLY) == 0, 30, 0.2, "gauge 0")
            time.sleep(1.5)  # a round that saw it writable (a DISK_PATHS path counts once seen so)
            trigger.write_text("1\n")  # the kernel: "EXT4-fs error ... Remounting filesystem read-only"
            with pytest.raises(OSError):
                (data / "probe").write_text("x")
            wait_for(lambda: value_of(agent, GAUGE, condition=names.FILESYSTEM_READ_ONLY) == 1, 30, 0.2, "gauge 1")
            assert held(agent)[names.FILESYSTEM_READ_ONLY] == f"read-only: {data} (configured) on {data}"
            umount(data)  # what an operator does: unmount, repair, mount again
            subprocess.run(["e2fsck", "-f", "-y", str(image)], capture_output=True, timeout=60)
            mount("-o", "loop,errors=remount-ro", str(image), str(data))
            raised, cleared = raised_then_cleared(backend, node_id, names.FILESYSTEM_READ_ONLY)
            assert raised["reason"] == f"read-only: {data} (configured) on {data}"
    finally:
        umount(data)


def test_infiniband_ports_and_data_links_from_sysfs(backend, tmp_path):  # noqa: F811
    sysfs = FakeSysfs(tmp_path / "sys", gpus=0, nics=2)
    env = agent_env_for(
        backend,
        tmp_path,
        inventory_interval_sec=1,
        traffic_interval_sec=0.5,
        sysfs_root=sysfs.root,
        ib_min_ports=2,
        ib_min_rate_gbps=400,
        ib_rising_sec=3,
    )
    with running(env, tmp_path / "agent.log") as agent:
        node_id = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])["node_id"]
        ib = (names.INFINIBAND_PORT_DOWN, names.INFINIBAND_RATE_LOW, names.INFINIBAND_ERRORS_RISING)
        for name in (*ib, names.NETWORK_LINK_DOWN):
            wait_for(lambda name=name: value_of(agent, GAUGE, condition=name) == 0, 30, 0.2, f"{name} checked")

        sysfs.set_port(1, state="1: DOWN", phys_state="2: Polling")  # the cable pulled
        sysfs.link(1, "down")
        wait_for(lambda: value_of(agent, GAUGE, condition=names.INFINIBAND_PORT_DOWN) == 1, 30, 0.2, "port down")
        # the two files are written one after the other: a sample between them reads `LinkUp`
        down = "mlx5_1 port 1 down (Polling); 1 InfiniBand ports active, 2 expected"
        wait_for(lambda: held(agent).get(names.INFINIBAND_PORT_DOWN) == down, 10, 0.2, "the port's reason")
        wait_for(lambda: names.NETWORK_LINK_DOWN in held(agent), 30, 0.2, "the link down")
        assert held(agent)[names.NETWORK_LINK_DOWN] == "link not up: ibp97s0 down"
        sysfs.set_port(1, rate="200 Gb/sec (4X HDR)")  # back, at half its rate
        sysfs.link(1, "up")
        raised_then_cleared(backend, node_id, names.INFINIBAND_PORT_DOWN)
        raised_then_cleared(backend, node_id, names.NETWORK_LINK_DOWN)
        wait_for(lambda: names.INFINIBAND_RATE_LOW in held(agent), 30, 0.2, "the low rate")
        assert held(agent)[names.INFINIBAND_RATE_LOW] == "mlx5_1 port 1 at 200 Gb/s, below 400 Gb/s"
        sysfs.set_port(1)
        raised_then_cleared(backend, node_id, names.INFINIBAND_RATE_LOW)

        sysfs.bump(0, "symbol_error", 7)
        sysfs.bump(0, "link_downed")
        wait_for(lambda: names.INFINIBAND_ERRORS_RISING in held(agent), 30, 0.2, "errors rising")
        assert held(agent)[names.INFINIBAND_ERRORS_RISING] == (
            "rose: mlx5_0 port 1: link_downed; mlx5_0 port 1: symbol_errors"
        )
        raised, cleared = raised_then_cleared(backend, node_id, names.INFINIBAND_ERRORS_RISING)
        assert cleared["since"] - raised["since"] >= 3  # held for IB_RISING_SEC, then cleared

        def still_held() -> set[str]:
            conditions = backend.inventory(node_id)["inventory"]["conditions"]
            return {n for n, s in conditions.items() if s["active"] is not False}

        # the round's record follows its events into the outbox: the backend has it a moment later
        allowed = {names.CLOCK_UNSYNCHRONISED}  # this VM's own clock, as adjtimex says
        wait_for(lambda: still_held() <= allowed, 10, 0.2, "the record's conditions cleared")


def test_an_unsynchronised_clock_through_the_status_file(backend, tmp_path):  # noqa: F811
    status = tmp_path / "timex"
    status.write_text(SYNCED)
    env = agent_env_for(backend, tmp_path, inventory_interval_sec=1, clock_status_file=status)
    with running(env, tmp_path / "agent.log") as agent:
        node_id = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])["node_id"]
        wait_for(lambda: value_of(agent, GAUGE, condition=names.CLOCK_UNSYNCHRONISED) == 0, 30, 0.2, "synced")
        status.write_text(UNSYNCED)
        wait_for(lambda: value_of(agent, GAUGE, condition=names.CLOCK_UNSYNCHRONISED) == 1, 30, 0.2, "unsynced")
        status.write_text("status: sixty-four\n")  # unreadable: unknown, no gauge sample, no verdict either way
        wait_for(lambda: value_of(agent, GAUGE, condition=names.CLOCK_UNSYNCHRONISED) is None, 30, 0.2, "unknown")
        status.write_text(SYNCED)
        events = wait_for(
            lambda: len(e := condition_events(backend, node_id, names.CLOCK_UNSYNCHRONISED)) == 3 and e,
            30,
            0.2,
            "three changes at the backend",
        )
        assert [(e["old"], e["active"]) for e in events] == [(False, True), (True, None), (None, False)]
        assert events[0]["reason"] == (
            "the kernel's clock is not synchronised: maximum error 16 s or more; STA_UNSYNC set"
        )
        assert events[1]["reason"].startswith("cannot read the clock's status: ")


def test_the_persistence_daemon_where_the_gpus_need_it(backend, tmp_path):  # noqa: F811
    gpus = GpuState(tmp_path / "nvml", count=2)
    gpus.gpus[1]["persistence"] = 0
    gpus.write()
    env = agent_env_for(backend, tmp_path, inventory_interval_sec=1)
    env.update(gpus.env())
    daemon = tmp_path / "bin" / "nvidia-persistenced"  # its name is what a process table shows
    daemon.parent.mkdir()
    shutil.copy("/bin/sleep", daemon)
    with running(env, tmp_path / "agent.log") as agent:
        node_id = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])["node_id"]
        wait_for(lambda: names.PERSISTENCE_DAEMON_STOPPED in held(agent), 30, 0.2, "the daemon missing")
        assert held(agent)[names.PERSISTENCE_DAEMON_STOPPED] == (
            "nvidia-persistenced is not running and persistence mode is off on GPU 1"
        )
        started = subprocess.Popen([str(daemon), "600"])
        try:
            raised_then_cleared(backend, node_id, names.PERSISTENCE_DAEMON_STOPPED)
        finally:
            started.kill()
            started.wait(10)
        wait_for(lambda: names.PERSISTENCE_DAEMON_STOPPED in held(agent), 30, 0.2, "stopped again")


def test_doctor_has_a_line_per_condition(tmp_path):
    status = tmp_path / "timex"
    status.write_text(UNSYNCED)
    sysfs = FakeSysfs(tmp_path / "sys", gpus=0, nics=1)
    sysfs.set_port(0, rate="100 Gb/sec (4X EDR)")
    env = agent_env(
        tmp_path,
        backend_url="http://127.0.0.1:9",  # nobody answers: doctor's backend checks fail, its others run
        clock_status_file=status,
        sysfs_root=sysfs.root,
        ib_min_rate_gbps=400,
    )
    done = subprocess.run(
        [sys.executable, "-m", "faden_agent", "doctor", "--json"], env=env, capture_output=True, text=True, timeout=180
    )
    checks = {c["name"]: c for c in orjson.loads(done.stdout)["checks"]}
    assert checks[names.CLOCK_UNSYNCHRONISED]["status"] == "warn"
    assert "timedatectl" in checks[names.CLOCK_UNSYNCHRONISED]["hint"]
    assert checks[names.INFINIBAND_RATE_LOW]["detail"] == "mlx5_0 port 1 at 100 Gb/s, below 400 Gb/s"
    assert checks[names.FILESYSTEM_READ_ONLY] == {
        "name": names.FILESYSTEM_READ_ONLY,
        "status": "ok",
        "detail": "no",
        "hint": "",
    }
    assert checks[names.INFINIBAND_PORT_DOWN]["status"] == "ok"
