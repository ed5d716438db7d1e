"""The file systems that matter to a GPU node: root, Docker's data root (images and
container layers), the agent's state directory and the configured model/cache paths.
Notes (why, figures, history): docs/design-notes.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psutil

LOW_FREE_FRACTION = 0.10
LOW_FREE_BYTES = 5 * 1024**3
DEFAULT_DOCKER_ROOT = "/var/lib/docker"


def is_low(total: int, free: int) -> bool:
    return free < LOW_FREE_BYTES or (total > 0 and free < total * LOW_FREE_FRACTION)


def wanted_paths(state_dir: Path, disk_paths: tuple[Path, ...], docker_root: str | None) -> list[tuple[str, str]]:
    """(role, path) pairs in a stable order."""
    pairs = [("root", "/"), ("docker", docker_root or DEFAULT_DOCKER_ROOT), ("state", str(state_dir))]
    pairs += [("configured", str(p)) for p in disk_paths]
    return pairs


def _mounts() -> list[Any]:
    """Mount points, longest first, so the first prefix match is the innermost mount."""
    return sorted(psutil.disk_partitions(all=True), key=lambda p: len(p.mountpoint), reverse=True)


def _mount_of(real: str, mounts: list[Any]) -> Any | None:
    for part in mounts:
        mp = part.mountpoint.rstrip("/") or "/"
        if real == mp or real.startswith(mp + "/") or mp == "/":
            return part
    return None


def probe_disks(state_dir: Path, disk_paths: tuple[Path, ...], docker_root: str | None) -> list[dict[str, Any]]:
    mounts = _mounts()
    by_device: dict[int, dict[str, Any]] = {}
    missing = []
    for role, path in wanted_paths(state_dir, disk_paths, docker_root):
        try:
            real = os.path.realpath(path)
            st_dev = os.stat(real).st_dev
        except OSError as exc:
            missing.append({"paths": [path], "roles": [role], "error": exc.strerror or str(exc)})
            continue
        entry = by_device.get(st_dev)
        if entry is None:
            entry = by_device[st_dev] = _filesystem(real, mounts)
        if path not in entry["paths"]:
            entry["paths"].append(path)
        if role not in entry["roles"]:
            entry["roles"].append(role)
    return list(by_device.values()) + missing


def _filesystem(real: str, mounts: list[Any]) -> dict[str, Any]:
    usage = psutil.disk_usage(real)
    part = _mount_of(real, mounts)
    return {
        "paths": [],
        "roles": [],
        "mountpoint": part.mountpoint if part else None,
        "device": part.device if part else None,
        "fstype": part.fstype if part else None,
        "total": usage.total,
        "low": is_low(usage.total, usage.free),
        "usage": {"used": usage.used, "free": usage.free, "percent": usage.percent},
    }
