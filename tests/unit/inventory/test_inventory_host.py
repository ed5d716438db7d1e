"""Host, disk and network facts checked against the machine itself (/proc, /sys, statvfs)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from faden_agent.config import load_config
from faden_agent.disk.disklow import low_threshold
from faden_agent.workers.inventory.disks import probe_disks
from faden_agent.workers.inventory.host import probe_host
from faden_agent.workers.inventory.network import probe_network
from faden_agent.workers.inventory.record import content_hash
from tests.support.agentproc import wait_for

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
    ray = tmp_path / "ray" / "not-yet"
    disks = probe_disks(state, (models, tmp_path / "missing"), None, lambda total: total // 10, ray)
    same_fs_as_tmp = next(d for d in disks if str(state) in d.get("paths", []))
    assert str(models) in same_fs_as_tmp["paths"]  # one entry for one file system
    assert {"state", "configured", "ray_logs"} <= set(same_fs_as_tmp["roles"])  # its nearest existing parent
    vfs = os.statvfs(state)
    assert same_fs_as_tmp["total"] == vfs.f_blocks * vfs.f_frsize
    assert abs(same_fs_as_tmp["usage"]["free"] - vfs.f_bavail * vfs.f_frsize) < 64 * 1024**2
    root = next(d for d in disks if "/" in d.get("paths", []))
    assert "root" in root["roles"] and root["mountpoint"] == "/"
    missing = next(d for d in disks if str(tmp_path / "missing") in d["paths"])
    assert missing["error"] == "No such file or directory" and missing["roles"] == ["configured"]


def test_low_disk_threshold_is_the_smaller_of_10_percent_and_20_gib():
    config = load_config({})
    assert low_threshold(100 * GiB, config) == 10 * GiB  # 10 % of a small disk
    assert low_threshold(1000 * GiB, config) == 20 * GiB  # 20 GiB of a big one
    narrow = load_config({"FADEN_NODE_AGENT_DISK_LOW_PERCENT": "5", "FADEN_NODE_AGENT_DISK_LOW_GIB": "1"})
    assert low_threshold(100 * GiB, narrow) == 1 * GiB and low_threshold(10 * GiB, narrow) == GiB // 2


def link_is_up(name: str) -> bool:
    """Administratively up and with a carrier, as the kernel's sysfs says."""
    if not int(Path(f"/sys/class/net/{name}/flags").read_text(), 16) & 0x1:
        return False
    try:
        return Path(f"/sys/class/net/{name}/carrier").read_text().strip() == "1"
    except OSError:  # EINVAL: no carrier to read on a down link
        return False


def test_network_interfaces_match_sysfs():
    interfaces = {i["name"]: i for i in probe_network()}
    expected = {n for n in os.listdir("/sys/class/net") if not n.startswith("veth")}
    assert set(interfaces) == expected
    for name, iface in interfaces.items():
        assert iface["mtu"] == int(Path(f"/sys/class/net/{name}/mtu").read_text())
    assert {"family": "ipv4", "address": "127.0.0.1", "netmask": "255.0.0.0"} in interfaces["lo"]["addresses"]
    for name, iface in interfaces.items():
        link = iface["usage"] if iface["bridge"] else iface
        assert iface["bridge"] == Path(f"/sys/class/net/{name}/bridge").is_dir()
        if name not in ("docker0",):  # other tests' containers flip docker0 meanwhile
            assert link["up"] is link_is_up(name), name
        families = {a["family"] for a in iface["addresses"]}
        assert ("mac" in families) is (not iface["bridge"]), iface


def test_a_bridge_keeps_its_hash_while_ports_come_and_go(tmp_path):
    """A Linux bridge's carrier, speed and MAC follow its ports: docker0's flip with every
    container. A real bridge in a network namespace of its own gets a port, then loses it;
    the record's content hash (everything but "usage") stays the same."""
    if shutil.which("ip") is None or os.geteuid() != 0:
        reason = "needs root and iproute2 for a network namespace (tests/infra/start-services.sh installs it)"
        if os.environ.get("FADEN_TEST_REQUIRE_DOCKER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    ns = f"faden-br-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:

        def in_ns(*cmd):
            subprocess.run(["ip", "netns", "exec", ns, *cmd], check=True)

        def probe():
            out = subprocess.run(
                [
                    "ip",
                    "netns",
                    "exec",
                    ns,
                    sys.executable,
                    "-c",
                    "import orjson, sys; from faden_agent.workers.inventory.network import probe_network; "
                    "sys.stdout.buffer.write(orjson.dumps(probe_network()))",
                ],
                check=True,
                capture_output=True,
            ).stdout
            return {i["name"]: i for i in orjson.loads(out)}

        in_ns("ip", "link", "add", "br0", "type", "bridge")
        in_ns("ip", "link", "set", "br0", "up")
        alone = probe()
        in_ns("ip", "link", "add", "p0", "type", "veth", "peer", "name", "p1")
        in_ns("ip", "link", "set", "p0", "master", "br0")
        in_ns("ip", "link", "set", "p0", "up")
        in_ns("ip", "link", "set", "p1", "up")
        with_port = wait_for(lambda: (b := probe())["br0"]["usage"]["up"] and b, 10, what="br0's carrier with a port")
        in_ns("ip", "link", "del", "p0")
        after = wait_for(lambda: (b := probe())["br0"]["usage"]["up"] is False and b, 10, what="br0 without its port")
        states = [alone, with_port, after]
        assert all(s["br0"]["bridge"] for s in states)
        assert len({content_hash({"network": [s["br0"]]}) for s in states}) == 1
        assert with_port["p1"]["bridge"] is False and with_port["p1"]["up"] is True
        assert any(a["family"] == "mac" for a in with_port["p1"]["addresses"])
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
