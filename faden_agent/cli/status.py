"""What `faden-agent status` reports: membership and the backend link, never a secret."""

from __future__ import annotations

import time
from typing import Any

from faden_agent.config import Config
from faden_agent.ipc import control
from faden_agent.node import drainstate
from faden_agent.node.linkstatus import read_link_status
from faden_agent.node.membership import MembershipError, load_membership


def collect_status(config: Config) -> dict[str, Any]:
    out: dict[str, Any] = {
        "backend_url": config.backend_url,
        "state_path": str(config.state_path),
        "enrolled": False,
        "node_id": None,
        "agent_id": config.agent_id,
        "enrolled_at": None,
        "state_error": None,
        "agent_running": False,
        "connection": "unknown",
        "connection_since": None,
        "last_contact_at": None,
        "last_error": None,
        "last_error_at": None,
        "link_source": None,
        "disk_full": None,  # {"path", "error", "since", "paths", "worker"} while a worker cannot write
        "running_version": None,  # the stream worker's, from the last `hello` (workers/stream/expected.py)
        "expected_version": None,  # what the backend said it expects; None: it did not say
        "missing_capabilities": [],  # what the backend expects and this build lacks
        "drain": drainstate.heartbeat_view(config.state_dir),  # schedulable, cordoned, draining, drained
        "labels": dict(config.labels),
        "topology": None,  # the running inventory's summary (workers/inventory/placement.py)
        "conditions": None,  # the running inventory's active node conditions: {name: reason}
    }
    try:
        membership = load_membership(config.state_path)
    except MembershipError as exc:
        out["state_error"] = str(exc)
    else:
        if membership is not None:
            out.update(
                enrolled=True,
                node_id=membership.node_id,
                agent_id=membership.agent_id,
                enrolled_at=membership.enrolled_at,
            )
            if membership.backend_url != config.backend_url:
                out["state_error"] = f"state file belongs to backend {membership.backend_url}"
    table = control.ps(config.runtime_dir)
    link, source, out["disk_full"] = _live_link(table)
    inventory = _worker_status(table, "inventory")
    if inventory is not None:
        found = inventory.get("placement")
        placement: dict[str, Any] = found if isinstance(found, dict) else {}
        out["labels"] = placement.get("labels", out["labels"])
        out["topology"] = {k: v for k, v in placement.items() if k != "labels"} or None
        out["conditions"] = inventory.get("conditions") if isinstance(inventory.get("conditions"), dict) else None
    if link is None:
        link, source = read_link_status(config.state_dir), "status file"
    else:
        out["agent_running"] = True
    if link:
        out.update(
            connection=link.get("state", "unknown") if out["agent_running"] else "stopped",
            connection_since=link.get("since"),
            last_contact_at=link.get("last_contact_at"),
            last_error=link.get("last_error"),
            last_error_at=link.get("last_error_at"),
            link_source=source,
            running_version=link.get("running_version"),
            expected_version=link.get("expected_version"),
            missing_capabilities=link.get("missing_capabilities") or [],
        )
    elif not out["agent_running"]:
        out["connection"] = "stopped"
    return out


def _worker_status(table: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    for worker in (table or {}).get("workers", []):
        if isinstance(worker, dict) and worker.get("name") == name and isinstance(worker.get("status"), dict):
            return worker["status"]
    return None


def _live_link(table: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str | None, dict[str, Any] | None]:
    """(link, where it came from, disk_full of the first worker that cannot write)."""
    if table is None:
        return None, None, None
    workers = [w for w in table.get("workers", []) if isinstance(w, dict)]
    disk_full = next(
        (
            {**w["status"]["disk_full"], "worker": w.get("name")}
            for w in workers
            if isinstance(w.get("status"), dict) and isinstance(w["status"].get("disk_full"), dict)
        ),
        None,
    )
    for worker in workers:
        if worker.get("name") == "stream":
            link = (worker.get("status") or {}).get("link")
            if link:
                return link, "stream worker", disk_full
            return {"state": f"stream worker {worker.get('state', '?').lower()}"}, "supervisor", disk_full
    return {"state": "no stream worker"}, "supervisor", disk_full


def _when(epoch: float | None) -> str:
    if not epoch:
        return "never"
    ago = max(0.0, time.time() - epoch)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))
    return f"{stamp} ({ago:.0f}s ago)"


def format_status(status: dict[str, Any]) -> str:
    member = f"yes, node {status['node_id']}" if status["enrolled"] else "no"
    lines = [
        f"enrolled:      {member}",
        f"agent id:      {status['agent_id']}",
        f"backend:       {status['backend_url']}",
        f"agent running: {'yes' if status['agent_running'] else 'no'}",
        f"connection:    {status['connection']}"
        + (f" since {_when(status['connection_since'])}" if status.get("connection_since") else ""),
        f"last contact:  {_when(status['last_contact_at'])}",
        f"last error:    {status['last_error'] or '-'}"
        + (f" at {_when(status['last_error_at'])}" if status.get("last_error_at") else ""),
    ]
    drain = status.get("drain") or {}
    if drain.get("state") not in (None, "schedulable"):
        since = _when(drain.get("since"))
        lines.append(f"drain:         {drain['state']} since {since} (`faden-agent uncordon` ends it)")
    if status.get("running_version"):
        expected = status.get("expected_version")
        differs = expected and expected != status["running_version"]
        lines.append(
            f"version:       {status['running_version']}"
            + (f" (the backend expects {expected})" if differs else " (as the backend expects)" if expected else "")
        )
    if status.get("missing_capabilities"):
        lines.append(f"lacks:         {', '.join(status['missing_capabilities'])} (the backend expects them)")
    if status.get("state_error"):
        lines.append(f"state file:    {status['state_error']}")
    if status.get("disk_full"):
        full = status["disk_full"]
        lines.append(f"disk_full:     cannot write {full['path']} since {_when(full.get('since'))}; writes are retried")
    lines += standing_lines(status)
    if status.get("service") is not None:  # added by `faden-agent status` (faden_agent/service)
        lines.append(f"service:       {format_service(status['service'])}")
    return "\n".join(lines)


def format_service(service: dict[str, Any]) -> str:
    if not service.get("systemd"):
        return "systemd not reachable (not run as a service here)"
    if not service.get("installed"):
        return f"no {service['scope']} service installed (`faden-agent start`)"
    pid = f", main pid {service['main_pid']}" if service.get("main_pid") else ""
    return (
        f"{service['scope']} service {service['active']} ({service['sub']}), {service['enabled']}, "
        f"{service['restarts']} restarts{pid}"
    )


def standing_lines(status: dict[str, Any]) -> list[str]:
    """Labels, the found topology and the node conditions that hold (the last two from the running agent)."""
    labels = status.get("labels") or {}
    lines = [f"labels:        {','.join(f'{k}={v}' for k, v in sorted(labels.items())) or '-'}"]
    topology = status.get("topology")
    if topology:
        words = [f"{topology.get('gpus', 0)} GPUs"]
        if topology.get("nvlink_cliques"):
            words[0] += " in NVLink clique " + ",".join(map(str, topology["nvlink_cliques"]))
        words.append(f"{topology.get('rdma_devices', 0)} RDMA devices")
        if topology.get("ib_subnets"):
            words.append("IB subnet " + ",".join(topology["ib_subnets"]))
        words.append(f"{topology.get('gpudirect_pairs', 0)} GPUDirect pairs")
        lines.append(f"topology:      {', '.join(words)}")
    conditions = status.get("conditions")
    if conditions is not None:
        lines.append(f"conditions:    {'none' if not conditions else ''}")
        lines[-1] = lines[-1].rstrip()
        lines += [f"  {name}: {reason}" for name, reason in sorted(conditions.items())]
    return lines
