"""Where the machine stands, in a few figures for `faden-agent status`: the operator's labels and
a summary of the found topology (the worker's status under `placement`, which heartbeats leave
out: the backend has the inventory's `labels` and `topology` sections themselves)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from faden_agent.protocol.status import Placement


def placement(sections: dict[str, Any] | None) -> Placement:
    """Where the machine stands, for `faden-agent status` (ps only: the backend has the
    inventory's `labels` and `topology`): the labels, and the topology in a few figures."""
    sections = sections or {}
    found = sections.get("topology")
    topology: dict[str, Any] = found if isinstance(found, dict) else {}
    gpus = [g for g in topology.get("gpus") or [] if isinstance(g, dict)]
    return {
        "labels": sections.get("labels") or {},
        "ib_subnets": topology.get("ib_subnets") or [],
        "gpus": len(gpus),
        "nvlink_cliques": sorted({g["nvlink_clique"] for g in gpus if isinstance(g.get("nvlink_clique"), int)}),
        "fabric_clusters": sorted({g["fabric_cluster"] for g in gpus if isinstance(g.get("fabric_cluster"), str)}),
        "rdma_devices": len(topology.get("rdma") or []),
        "gpudirect_pairs": len(topology.get("gpudirect") or []),
    }
