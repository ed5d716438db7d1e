"""Prometheus HTTP service discovery (`http_sd_configs`) of the managed serving containers:
/sd/workloads answers a JSON list of target groups, one per container whose spec names a
metrics port, labelled machine, cluster, container (and workload), from the inventory
worker's last status; one scrape config then covers every vLLM on every machine."""

from __future__ import annotations

from typing import Any

import orjson

PATH = "/sd/workloads"
JSON = "application/json"
MAX_TARGETS = 64


def targets(table: dict[str, Any], machine: str) -> list[dict[str, Any]]:
    rows = {w.get("name"): w for w in table.get("workers", []) if isinstance(w, dict)}
    status = (rows.get("inventory") or {}).get("status") or {}
    containers = (status.get("workloads") or {}).get("containers") or {}
    groups = []
    for name, entry in sorted(containers.items())[:MAX_TARGETS]:
        endpoint = entry.get("endpoint") if isinstance(entry, dict) else None
        if not isinstance(endpoint, dict) or not endpoint.get("target"):
            continue
        labels = {"__metrics_path__": str(endpoint.get("path") or "/metrics"), "machine": machine, "container": name}
        labels.update({key: str(entry[key]) for key in ("cluster", "workload") if entry.get(key)})
        groups.append({"targets": [str(endpoint["target"])], "labels": labels})
    return groups


def document(table: dict[str, Any], machine: str) -> bytes:
    return orjson.dumps(targets(table, machine))
