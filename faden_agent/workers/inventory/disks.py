"""The file systems that matter to a GPU node: root, Docker's data root (images and
container layers), the agent's state directory, the Ray log directory and the configured
model/cache paths; one is flagged `low` below disklow.low_threshold, and `read_only` as its
mount says for that path (a read-only bind of a writable file system is an entry of its own).
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
    """Mount points, longest first, so the first prefix match is the innermost mount; of two
    on one path (a mount stacked on another), the later, which is the one in effect."""
    listed = list(enumerate(psutil.disk_partitions(all=True)))
    return [part for _, part in sorted(listed, key=lambda item: (len(item[1].mountpoint), item[0]), reverse=True)]


def is_read_only(real: str, part: Any) -> bool:
    """The path's mount or file system refuses writes: statvfs's ST_RDONLY (a read-only mount,
    a file system remounted read-only), or the mount's options: `ro`, or ext4's `emergency_ro`
    (on recent kernels, 6.18 here, an error under errors=remount-ro stops writes without ST_RDONLY)."""
    if os.statvfs(real).f_flag & os.ST_RDONLY:
        return True
    options = str(getattr(part, "opts", "") or "").split(",")
    return "ro" in options or "emergency_ro" in options


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
    by_device: dict[tuple[int, bool], dict[str, Any]] = {}
    missing = []
    for role, path in wanted_paths(state_dir, disk_paths, docker_root, ray_log_dir):
        try:
            real = os.path.realpath(path)
            st_dev = os.stat(real).st_dev
            read_only = is_read_only(real, _mount_of(real, mounts))
        except OSError as exc:
            missing.append({"paths": [path], "roles": [role], "error": exc.strerror or str(exc)})
            continue
        entry = by_device.get((st_dev, read_only))
        if entry is None:
            entry = by_device[(st_dev, read_only)] = _filesystem(real, mounts, low_below, read_only)
        if path not in entry["paths"]:
            entry["paths"].append(path)
        if role not in entry["roles"]:
            entry["roles"].append(role)
    return list(by_device.values()) + missing


def _filesystem(real: str, mounts: list[Any], low_below: Callable[[int], int], read_only: bool) -> dict[str, Any]:
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
        "read_only": read_only,
        "usage": {"used": usage.used, "free": usage.free, "percent": usage.percent},
    }
