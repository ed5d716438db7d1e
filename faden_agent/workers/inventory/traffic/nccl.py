"""A warning worth having: heavy TCP to peer machines while this machine's InfiniBand /
RoCE ports stay flat, the sign of NCCL (or another collective library) having fallen back
to sockets. Reported once per episode as an event; re-armed when the condition ends."""

from __future__ import annotations

from typing import Any

HEAVY_TCP_BYTES_PER_S = 12_500_000  # 100 Mbit/s to peers: far above control traffic
FLAT_SHARE = 0.01  # RDMA moving under 1 % of that counts as flat
CONFIRM_SAMPLES = 2  # two samples in a row, so one burst does not warn


class FallbackWatch:
    def __init__(self) -> None:
        self.streak = 0
        self.active = False

    def check(self, data: dict[str, Any]) -> dict[str, Any] | None:
        """The event to report for this sample's record data, or None."""
        heavy = [p for p in data["peers"] if _tcp_rate(p) >= HEAVY_TCP_BYTES_PER_S]
        ports = [
            p
            for p in data["infiniband"] or []
            if p.get("state") == "ACTIVE" and p.get("counters") is not None and p.get("tx_bytes_per_s") is not None
        ]
        tcp = sum(_tcp_rate(p) for p in heavy)
        rdma = sum(p["tx_bytes_per_s"] + (p.get("rx_bytes_per_s") or 0) for p in ports)
        if not (heavy and ports and rdma < FLAT_SHARE * tcp):
            self.streak, self.active = 0, False
            return None
        self.streak += 1
        if self.active or self.streak < CONFIRM_SAMPLES:
            return None
        self.active = True
        names = ", ".join(p["address"] for p in heavy)
        return {
            "type": "traffic.rdma_idle_under_tcp_load",
            "severity": "warning",
            "message": f"{tcp / 1e6:.0f} MB/s of TCP to peer machines ({names}) while the RDMA ports "
            f"moved {rdma / 1e6:.2f} MB/s: NCCL may have fallen back to sockets",
            "since": data["collected_at"],
            "peers": [
                {"address": p["address"], "node_id": p["node_id"], "tcp_bytes_per_s": _tcp_rate(p)} for p in heavy
            ],
            "rdma_ports": [f"{p['device']}/{p['port']}" for p in ports],
            "tcp_bytes_per_s": tcp,
            "rdma_bytes_per_s": rdma,
        }


def _tcp_rate(peer: dict[str, Any]) -> float:
    return (peer.get("sent_bytes_per_s") or 0) + (peer.get("received_bytes_per_s") or 0)
