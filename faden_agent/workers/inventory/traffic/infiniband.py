"""InfiniBand / RoCE ports from sysfs: <root>/class/infiniband/<device>/ports/<n>/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from faden_agent.node.sysfs import read_attr, read_int

DATA_UNIT = 4  # IB data counters count 32-bit words
DATA = {"tx_bytes": "port_xmit_data", "rx_bytes": "port_rcv_data"}
OTHER = {
    "tx_packets": "port_xmit_packets",
    "rx_packets": "port_rcv_packets",
    "rx_errors": "port_rcv_errors",
    "tx_discards": "port_xmit_discards",
    "symbol_errors": "symbol_error",
    "link_downed": "link_downed",
    "link_error_recovery": "link_error_recovery",
    "link_integrity_errors": "local_link_integrity_errors",
    "buffer_overrun_errors": "excessive_buffer_overrun_errors",
}
CONGESTION = ("np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets", "out_of_sequence", "packet_seq_err")


def read_ports(sysfs_root: Path) -> list[dict[str, Any]] | None:
    """Every port's state and cumulative counters; None when the host has no RDMA devices."""
    base = Path(sysfs_root) / "class" / "infiniband"
    if not base.is_dir():
        return None
    ports = []
    for device in sorted(base.iterdir()):
        for port in sorted((device / "ports").glob("*")):
            ports.append(_read_port(device.name, port))
    return ports


def _read_port(device: str, port: Path) -> dict[str, Any]:
    state = read_attr(port / "state")  # "4: ACTIVE"
    phys_state = read_attr(port / "phys_state")  # "5: LinkUp"
    entry: dict[str, Any] = {
        "device": device,
        "port": port.name,
        "link_layer": read_attr(port / "link_layer"),  # InfiniBand, or Ethernet for RoCE
        "state": state.split(":", 1)[-1].strip() if state else None,
        "phys_state": phys_state.split(":", 1)[-1].strip() if phys_state else None,
        "rate": read_attr(port / "rate"),
    }
    counters: dict[str, int] = {}
    for name, file in DATA.items():
        value = read_int(port / "counters_ext" / f"{file}_64")
        if value is None:
            value = read_int(port / "counters" / file)
        if value is not None:
            counters[name] = value * DATA_UNIT
    for name, file in OTHER.items():
        value = read_int(port / "counters" / file)
        if value is not None:
            counters[name] = value
    congestion = {name: v for name in CONGESTION if (v := read_int(port / "hw_counters" / name)) is not None}
    if "tx_bytes" not in counters or "rx_bytes" not in counters:
        entry["counters"] = None
        entry["note"] = "no readable data counters: traffic on this port is not measured"
    else:
        entry["counters"] = counters
    if congestion:
        entry["congestion"] = congestion
    return entry
