"""When a file system counts as low on space, and what fills it: the one threshold the
inventory's `low` flag, the disk.low / disk.recovered events and `doctor` share, and the
biggest consumers the agent knows of (images, managed containers' logs, Ray logs).
Measuring never follows a symlink and stops after MAX_ENTRIES files (then `at_least`)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from faden_agent import protocol
from faden_agent.config import Config
from faden_agent.engine.client import EngineClient

MAX_ENTRIES = 200_000  # files counted under the Ray log directory before giving up


def low_threshold(total: int, config: Config) -> int:
    """Free bytes below which a file system is low: DISK_LOW_PERCENT of it or DISK_LOW_GIB,
    whichever is smaller."""
    return int(min(total * config.disk_low_percent / 100, config.disk_low_gib * 2**30))


def tree_bytes(root: Path, budget: int = MAX_ENTRIES) -> tuple[int, bool]:
    """(bytes of the regular files under root, whether the count stopped at the budget)."""
    total, seen, todo = 0, 0, [str(root)]
    while todo:
        try:
            entries = list(os.scandir(todo.pop()))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > budget:
                return total, True
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                todo.append(entry.path)
            elif stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total, False


def consumers(config: Config) -> list[dict[str, Any]]:
    """The three consumers the agent knows of, biggest first; one the agent cannot measure
    now (no engine) is left out."""
    found: list[dict[str, Any]] = []
    ray_bytes, partial = tree_bytes(config.ray_log_dir)
    found.append({"what": "ray_logs", "bytes": ray_bytes, "path": str(config.ray_log_dir), "at_least": partial})
    try:
        found += _docker_consumers(config)
    except Exception:  # noqa: BLE001 - an engine that does not answer: the rest still tells
        pass
    return sorted(found, key=lambda c: -c["bytes"])[:3]


def _docker_consumers(config: Config) -> list[dict[str, Any]]:
    engine = EngineClient(config.docker_host, timeout_s=config.docker_timeout_sec)
    try:
        images = {
            "what": "images",
            "bytes": int(engine.df().get("LayersSize") or 0),
            "path": engine.info()["DockerRootDir"],
        }
        logs = 0
        for summary in engine.containers(all=True, filters=protocol.MANAGED_FILTER):
            log_path = engine.inspect_container(summary["Id"]).get("LogPath")
            if log_path:
                logs += sum(_size(p) for p in Path(log_path).parent.glob(Path(log_path).name + "*"))
        return [images, {"what": "container_logs", "bytes": logs}]
    finally:
        engine.close()


def _size(path: Path) -> int:
    try:
        info = path.lstat()
    except OSError:
        return 0
    return info.st_size if stat.S_ISREG(info.st_mode) else 0
