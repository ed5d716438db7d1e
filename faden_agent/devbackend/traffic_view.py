"""`faden-agent admin traffic CLUSTER`: the cluster's traffic matrix as a table."""

from __future__ import annotations

import time
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


def _table(title: str, names: list[str], cells: list[list[str]]) -> list[str]:
    width = max(len(c) for line in cells for c in line + [n for n in names])
    first = max(len(n) for n in names + [CORNER])
    lines = [title, f"{CORNER:<{first}}  " + "  ".join(f"{n:<{width}}" for n in names)]
    for name, line in zip(names, cells, strict=True):
        lines.append(f"{name:<{first}}  " + "  ".join(f"{c:<{width}}" for c in line))
    return lines


def _direction(probes: list[dict[str, Any]], sender: str, receiver: str) -> tuple[dict[str, Any], Any] | None:
    """The newest probe entry measuring sender -> receiver, with its rate: the sender's
    probe of the receiver (its upload) or the receiver's probe of the sender (its download)."""
    found = [
        (e, e.get("send_bytes_per_s") if e["from"] == sender else e.get("receive_bytes_per_s"))
        for e in probes
        if (e["from"], e["to"]) in ((sender, receiver), (receiver, sender))
    ]
    return max(found, key=lambda pair: pair[0].get("at") or 0, default=None)


def _probe_cell(probes: list[dict[str, Any]], row: dict[str, Any], column: dict[str, Any]) -> str:
    if row is column:
        return "-"
    found = _direction(probes, row["node_id"], column["node_id"])
    if found is None:
        return "(not probed)"
    entry, rate = found
    if rate is None:
        return str(entry.get("reason") or "?")
    rtt = f" {entry['rtt_p50_ms']:.2f}/{entry['rtt_p99_ms']:.2f}ms" if entry.get("rtt_p50_ms") is not None else ""
    return f"{rate * 8 / 1e6:.0f}Mbit/s{rtt}"


def _probe_lines(matrix: dict[str, Any], machines: list[dict[str, Any]], names: list[str]) -> list[str]:
    probes = matrix.get("probes") or []
    lines = []
    if probes:
        newest = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(max(e.get("at") or 0 for e in probes)))
        cells = [[_probe_cell(probes, row, column) for column in machines] for row in machines]
        title = f"probes (latest, newest {newest}): throughput, RTT p50/p99 (rows send to columns)"
        lines += _table(title, names, cells)
        for entry in probes:
            if entry.get("reason"):
                lines.append(f"probe {entry['from']} -> {entry['to']}: {entry['reason']}: {entry.get('message')}")
    unable = [m for m in machines if m.get("probe_capable") is False]
    if unable:
        lines.append(
            f"agent lacks {protocol.PROBE_CAPABILITY} (not probed; update it): "
            + ", ".join(f"{_name(m)} ({m['node_id']})" for m in unable)
        )
    return lines


def wait_for_probes(client: Any, cluster: str, probe_id: str, wait_s: float) -> list[str]:
    """Wait for a probe round (AdminClient.probe) to end; lines on how it went."""
    deadline = time.monotonic() + wait_s
    status = client.probe_status(cluster, probe_id)
    while status["state"] == "running" and time.monotonic() < deadline:
        time.sleep(1.0)
        status = client.probe_status(cluster, probe_id)
    pairs = status["pairs"]
    lines = [f"probe round {probe_id}: {status['state']}, {len(pairs)} pairs"]
    if status["state"] == "running":
        lines[0] += f" (still running after {wait_s:g} s; the matrix shows what has ended)"
    lines += [
        f"probe {p['prober']} -> {p['target']}: command {p['state']} ({p['reason']})"
        for p in pairs
        if p["state"] not in ("running", protocol.SUCCEEDED)
    ]
    return lines


def render(matrix: dict[str, Any]) -> list[str]:
    machines = sorted(matrix["machines"], key=_name)
    if not machines:
        return [f"cluster {matrix['cluster']}: no machines"]
    names = [_name(m) for m in machines]
    cells = [[_cell(row, column) for column in machines] for row in machines]
    lines = _table(f"cluster {matrix['cluster']}: rate sent, RTT, interface (rows send to columns)", names, cells)
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
    return lines + _probe_lines(matrix, machines, names)
