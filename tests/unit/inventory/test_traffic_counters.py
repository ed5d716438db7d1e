"""Interface counters: the InfiniBand sysfs reader on a fake tree (4-byte units, extended
counters, a port without any), and NIC counters on a host without link stats."""

from __future__ import annotations

from pathlib import Path

from faden_agent.workers.inventory.traffic import infiniband


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_infiniband_counters_in_4_byte_units_ext_counters_and_a_port_without_any(tmp_path: Path):
    assert infiniband.read_ports(tmp_path) is None  # no RDMA device at all
    port = tmp_path / "class/infiniband/mlx5_0/ports/1"
    _write(port / "state", "4: ACTIVE\n")
    _write(port / "link_layer", "Ethernet\n")
    _write(port / "counters/port_xmit_data", "4294967295\n")  # a saturated 32-bit counter
    _write(port / "counters/port_rcv_data", "250\n")
    _write(port / "counters_ext/port_xmit_data_64", "10000000000\n")  # wins where present
    _write(port / "hw_counters/np_cnp_sent", "12\n")
    _write(tmp_path / "class/infiniband/hfi1_0/ports/1/state", "1: DOWN\n")
    ports = {p["device"]: p for p in infiniband.read_ports(tmp_path)}
    roce = ports["mlx5_0"]
    assert roce["counters"]["tx_bytes"] == 40_000_000_000 and roce["counters"]["rx_bytes"] == 1_000
    assert roce["state"] == "ACTIVE" and roce["link_layer"] == "Ethernet" and roce["congestion"] == {"np_cnp_sent": 12}
    assert ports["hfi1_0"]["counters"] is None and "not measured" in ports["hfi1_0"]["note"]


def test_nic_counters_survive_a_host_without_link_stats(monkeypatch):
    """psutil.net_if_stats raises ENOSYS under qemu-user (no SIOCETHTOOL): the whole traffic
    sample failed every interval; now speed and link state are unknown (None), counters stay."""
    from faden_agent.workers.inventory.traffic import nics

    def no_ethtool():
        raise OSError(38, "Function not implemented (originated from ioctl(SIOCETHTOOL))")

    monkeypatch.setattr(nics.psutil, "net_if_stats", no_ethtool)
    read = nics.read_nics()
    assert read, "this host has a NIC besides lo"
    for nic in read.values():
        assert nic["up"] is None and nic["speed_mbps"] is None
        assert nic["counters"]["rx_bytes"] >= 0
