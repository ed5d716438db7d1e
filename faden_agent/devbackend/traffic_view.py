"""`faden-agent admin traffic CLUSTER`: the cluster's traffic matrix as a table.

Rows send, columns receive: each cell is what the row's machine measured towards the
column's machine (rate sent, smoothed RTT, local interface). Machines whose agent lacks
the traffic capability are named below it (they need a newer agent), so are measurements
a machine could not make.
"""

from __future__ import annotations

from typing import Any

from faden_agent import protocol

CORNER = "FROM \\ TO"


def _rate(value: float | None) -> str:
    if value is None:
        return "?"
    for unit, size in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}B/s"


def _name(machine: dict[str, Any]) -> str:
    return str(machine.get("agent_id") or machine.get("address") or machine["node_id"])


def _cell(row: dict[str, Any], column: dict[str, Any]) -> str:
    if row is column:
        return "-"
    if not row["capable"]:
        return "(old agent)"
    traffic = row["traffic"]
    if traffic is None:
        return "(no data yet)"
    peer = next((p for p in traffic["peers"] if p["address"] == column["address"]), None)
    if peer is None:
        return "(not a peer yet)"
    if peer.get("rtt_ms") is not None:
        rtt = f"{peer['rtt_ms']:.2f}ms"
    else:  # RTT comes from open connections only
        rtt = "idle" if not peer.get("connections") else "rtt ?"
    return f"{_rate(peer.get('sent_bytes_per_s'))} {rtt} {peer.get('interface') or '?'}"


def render(matrix: dict[str, Any]) -> list[str]:
    machines = sorted(matrix["machines"], key=_name)
    if not machines:
        return [f"cluster {matrix['cluster']}: no machines"]
    names = [_name(m) for m in machines]
    cells = [[_cell(row, column) for column in machines] for row in machines]
    width = max(len(c) for line in cells for c in line + [n for n in names])
    first = max(len(n) for n in names + [CORNER])
    lines = [
        f"cluster {matrix['cluster']}: rate sent, RTT, interface (rows send to columns)",
        f"{CORNER:<{first}}  " + "  ".join(f"{n:<{width}}" for n in names),
    ]
    for name, line in zip(names, cells):
        lines.append(f"{name:<{first}}  " + "  ".join(f"{c:<{width}}" for c in line))
    for machine in machines:
        traffic = machine["traffic"]
        if not traffic:
            continue
        for port in traffic.get("infiniband") or []:
            if port.get("counters") is None:
                lines.append(f"{_name(machine)}: RDMA {port['device']}/{port['port']}: no counters (not measured)")
            else:
                lines.append(
                    f"{_name(machine)}: RDMA {port['device']}/{port['port']} {port.get('state')}: "
                    f"tx {_rate(port.get('tx_bytes_per_s'))} rx {_rate(port.get('rx_bytes_per_s'))}"
                )
        for note in traffic.get("not_measured") or []:
            lines.append(f"{_name(machine)}: not measured: {note}")
    old = [m for m in machines if not m["capable"]]
    if old:
        lines.append(
            f"agent lacks {protocol.TRAFFIC_CAPABILITY} (update it): "
            + ", ".join(f"{_name(m)} ({m['node_id']}, version {m.get('version') or '?'})" for m in old)
        )
    return lines
