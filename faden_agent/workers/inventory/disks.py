"""The file systems that matter to a GPU node: root, Docker's data root (images and
container layers), the agent's state directory, the Ray log directory and the configured
model/cache paths; one is flagged `low` below disklow.low_threshold.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

DEFAULT_DOCKER_ROOT = "/var/lib/docker"


def wanted_paths(
    state_dir: Path, disk_paths: tuple[Path, ...], docker_root: str | None, ray_log_dir: Path | None = None
) -> list[tuple[str, str]]:
    """(role, path) pairs in a stable order."""
    pairs = [("root", "/"), ("docker", docker_root or DEFAULT_DOCKER_ROOT), ("state", str(state_dir))]
    if ray_log_dir is not None:
        pairs.append(("ray_logs", str(_existing(ray_log_dir))))  # made with the first Ray container
    pairs += [("configured", str(p)) for p in disk_paths]
    return pairs


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _mounts() -> list[Any]:
    """Mount points, longest first, so the first prefix match is the innermost mount."""
    return sorted(psutil.disk_partitions(all=True), key=lambda p: len(p.mountpoint), reverse=True)


def _mount_of(real: str, mounts: list[Any]) -> Any | None:
    for part in mounts:
        mp = part.mountpoint.rstrip("/") or "/"
        if real == mp or real.startswith(mp + "/") or mp == "/":
            return part
    return None


def probe_disks(
    state_dir: Path,
    disk_paths: tuple[Path, ...],
    docker_root: str | None,
    low_below: Callable[[int], int],
    ray_log_dir: Path | None = None,
) -> list[dict[str, Any]]:
    """`low_below(total)`: the free bytes under which a file system is low."""
    mounts = _mounts()
    by_device: dict[int, dict[str, Any]] = {}
    missing = []
    for role, path in wanted_paths(state_dir, disk_paths, docker_root, ray_log_dir):
        try:
            real = os.path.realpath(path)
            st_dev = os.stat(real).st_dev
        except OSError as exc:
            missing.append({"paths": [path], "roles": [role], "error": exc.strerror or str(exc)})
            continue
        entry = by_device.get(st_dev)
        if entry is None:
            entry = by_device[st_dev] = _filesystem(real, mounts, low_below)
        if path not in entry["paths"]:
            entry["paths"].append(path)
        if role not in entry["roles"]:
            entry["roles"].append(role)
    return list(by_device.values()) + missing


def _filesystem(real: str, mounts: list[Any], low_below: Callable[[int], int]) -> dict[str, Any]:
    usage = psutil.disk_usage(real)
    part = _mount_of(real, mounts)
    return {
        "paths": [],
        "roles": [],
        "mountpoint": part.mountpoint if part else None,
        "device": part.device if part else None,
        "fstype": part.fstype if part else None,
        "total": usage.total,
        "low": usage.free < low_below(usage.total),
        "usage": {"used": usage.used, "free": usage.free, "percent": usage.percent},
    }
