"""Host, disk and network facts checked against the machine itself (/proc, /sys, statvfs)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from faden_agent.config import load_config
from faden_agent.workers.inventory.disks import LOW_FREE_BYTES, is_low, probe_disks
from faden_agent.workers.inventory.host import probe_host
from faden_agent.workers.inventory.network import probe_network

GiB = 1024**3


def meminfo_bytes(field: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == field:
            number, unit = value.split()
            assert unit == "kB"
            return int(number) * 1024
    raise AssertionError(f"{field} not in /proc/meminfo")


def test_host_facts_match_the_machine(tmp_path):
    config = load_config(
        {},
        state_path=tmp_path / "state.json",
        advertise_host="node-7.example",
        advertise_scheme="https",
        agent_id="agent-x",
    )
    host = probe_host(config)
    assert host["memory_total"] == meminfo_bytes("MemTotal")
    assert host["swap_total"] == meminfo_bytes("SwapTotal")
    assert host["cpu_logical"] == os.cpu_count()
    assert 1 <= host["cpu_physical"] <= host["cpu_logical"]
    assert host["hostname"] == socket.gethostname()
    assert host["kernel"] == os.uname().release and host["arch"] == os.uname().machine
    stat_lines = Path("/proc/stat").read_text().splitlines()
    btime = next(int(line.split()[1]) for line in stat_lines if line.startswith("btime"))
    assert abs(host["boot_time"] - btime) <= 1
    assert host["cpu_model"]
    assert host["agent_id"] == "agent-x"
    assert (host["advertise_host"], host["advertise_scheme"]) == ("node-7.example", "https")
    assert host["route_address"] == config.route_address
    usage = host["usage"]
    assert len(usage["load_avg"]) == 3
    assert 0 < usage["memory_used"] < host["memory_total"]
    assert abs(usage["memory_available"] - meminfo_bytes("MemAvailable")) < 256 * 1024**2


def test_disks_group_paths_by_file_system_and_match_statvfs(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    models = tmp_path / "models"
    models.mkdir()
    disks = probe_disks(state, (models, tmp_path / "missing"), docker_root=None)
    same_fs_as_tmp = next(d for d in disks if str(state) in d.get("paths", []))
    assert str(models) in same_fs_as_tmp["paths"]  # one entry for one file system
    assert {"state", "configured"} <= set(same_fs_as_tmp["roles"])
    vfs = os.statvfs(state)
    assert same_fs_as_tmp["total"] == vfs.f_blocks * vfs.f_frsize
    assert abs(same_fs_as_tmp["usage"]["free"] - vfs.f_bavail * vfs.f_frsize) < 64 * 1024**2
    root = next(d for d in disks if "/" in d.get("paths", []))
    assert "root" in root["roles"] and root["mountpoint"] == "/"
    missing = next(d for d in disks if str(tmp_path / "missing") in d["paths"])
    assert missing["error"] == "No such file or directory" and missing["roles"] == ["configured"]


def test_low_disk_threshold():
    assert is_low(1000 * GiB, 99 * GiB)  # under 10 %
    assert not is_low(1000 * GiB, 101 * GiB)
    assert is_low(20 * GiB, LOW_FREE_BYTES - 1)  # under 5 GiB, whatever the share
    assert not is_low(20 * GiB, 6 * GiB)


def test_network_interfaces_match_sysfs():
    interfaces = {i["name"]: i for i in probe_network()}
    expected = {n for n in os.listdir("/sys/class/net") if not n.startswith("veth")}
    assert set(interfaces) == expected
    for name, iface in interfaces.items():
        assert iface["mtu"] == int(Path(f"/sys/class/net/{name}/mtu").read_text())
    assert {"family": "ipv4", "address": "127.0.0.1", "netmask": "255.0.0.0"} in interfaces["lo"]["addresses"]
