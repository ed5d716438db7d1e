"""Retention of the Ray log directory: a removed container's directory goes once its lines
are shipped (or after RAY_LOG_RETENTION_SEC anyway, its unshipped lines reported lost), and
a container's directory over RAY_LOG_MAX_BYTES loses its oldest sessions (never the newest).
Deletion never follows a symlink (shutil.rmtree relative to the root's descriptor); what
is deleted unshipped is counted in lines and reported as one logs.lines_lost event.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from faden_agent.config import Config
from faden_agent.workers.logs.report import report_event
from faden_agent.workers.logs.sources.ray import mount
from faden_agent.workers.logs.sources.ray.mount import Refused

if TYPE_CHECKING:
    from faden_agent.protocol.status import RetentionStatus

ORPHAN_GRACE_S = 60.0  # a directory without a container for this long belongs to a removed one
MAX_SIZE_ENTRIES = 100_000  # entries summed per container directory (then: at least that size)
log = logging.getLogger(__name__)
Parts = tuple[str, ...]  # a path below the Ray log directory, by name
Listing = Callable[[int, Parts], list[os.DirEntry]]  # the tree's listing of an open directory, bounded


def bytes_below(name: str, parent_fd: int) -> int | None:
    """Disk bytes of the directory `name` under parent_fd (see tree_bytes); None if not one."""
    try:
        fd, _ = mount.open_dir(name, parent_fd, None)
    except (OSError, Refused):
        return None
    try:
        return tree_bytes(fd)
    finally:
        os.close(fd)


def tree_bytes(dir_fd: int) -> int:
    """Disk bytes under an open directory, nothing followed, at most MAX_SIZE_ENTRIES entries."""
    total, seen = 0, 0
    for _root, dirs, files, root_fd in os.fwalk(".", dir_fd=dir_fd, follow_symlinks=False):
        for name in (*dirs, *files):
            seen += 1
            if seen > MAX_SIZE_ENTRIES:
                return total
            try:
                total += os.stat(name, dir_fd=root_fd, follow_symlinks=False).st_blocks * 512
            except OSError:
                continue
    return total


class Retention:
    """What it is given: the tree's `listing`, the tails' `shipped` (a container's lines all
    accepted) and `release` (its files no longer tailed: the lines left unaccepted, and whether
    at least that many), and the names of the existing managed containers (None: unknown)."""

    def __init__(
        self,
        config: Config,
        listing: Listing,
        shipped: Callable[[str], bool],
        release: Callable[[Parts], tuple[int, bool]],
        live_containers: Callable[[], set[str] | None] | None,
    ):
        self.config = config
        self.listing = listing
        self.shipped = shipped
        self.release = release
        self.live_containers = live_containers
        self.orphan_since: dict[str, float] = {}
        self.removed_names: set[str] = set()  # told removed (Docker's destroy): no grace to wait
        self.lock = threading.Lock()
        self.wanted = False  # a check before the next full listing (a container was removed)
        self.removed = 0
        self.sessions_removed = 0
        self.lines_lost = 0

    def check(self, root_fd: int) -> None:
        names = [e.name for e in self.listing(root_fd, ()) if e.is_dir(follow_symlinks=False)]
        live = self.live_containers() if self.live_containers is not None else None
        now = time.monotonic()
        with self.lock:
            removed, self.removed_names, self.wanted = self.removed_names, set(), False
        if live is not None:
            self.orphan_since = {n: self.orphan_since.get(n, now) for n in names if n not in live}
            for name in removed & self.orphan_since.keys():
                self.orphan_since[name] = min(self.orphan_since[name], now - ORPHAN_GRACE_S)
            for name, since in list(self.orphan_since.items()):
                forced = now - since >= self.config.ray_log_retention_sec
                if now - since >= ORPHAN_GRACE_S and (forced or self.shipped(name)):
                    self.remove(root_fd, name, (name,), "unshipped_at_retention")
                    self.orphan_since.pop(name, None)
                    self.removed += 1
        for name in names:
            if name not in self.orphan_since:
                self.cap(root_fd, name)

    def container_removed(self, name: str) -> None:
        """Called from the container source's thread: check soon, without the grace."""
        with self.lock:
            self.removed_names.add(name)
            self.wanted = True

    def cap(self, root_fd: int, name: str) -> None:
        """Oldest sessions go while the container's directory is over its cap."""
        limit = self.config.ray_log_max_bytes
        try:
            container_fd, _ = mount.open_dir(name, root_fd, None)
        except (OSError, Refused):
            return
        try:
            size = tree_bytes(container_fd)
            if size <= limit:
                return
            sessions = sorted(
                e.name
                for e in self.listing(container_fd, (name,))
                if e.name.startswith("session_") and e.is_dir(follow_symlinks=False)
            )
            for session in sessions[:-1]:  # never the newest: Ray writes there
                freed = bytes_below(session, container_fd)
                if freed is None:
                    continue
                self.remove(container_fd, session, (name, session), "ray_log_cap")
                self.sessions_removed += 1
                size -= freed
                if size <= limit:
                    return
        finally:
            os.close(container_fd)

    def remove(self, parent_fd: int, name: str, parts: tuple[str, ...], reason: str) -> None:
        """Close what is tailed below parts, count what was not shipped, delete the tree."""
        lost, at_least = self.release(parts)
        try:
            shutil.rmtree(name, dir_fd=parent_fd)
        except OSError as exc:
            log.warning("logs: cannot remove the Ray logs %s (%s)", repr("/".join(parts))[:200], exc)
            return
        shown = "/".join(parts)[:200]
        log.info("logs: removed the Ray logs %s (%s); %d lines unshipped", shown, reason, lost)
        if lost:
            self.lines_lost += lost
            report_event(
                self.config,
                {
                    "type": "logs.lines_lost",
                    "source": f"ray:{mount.safe_name(parts[0])}",
                    "count": lost,
                    "at_least": at_least,
                    "reason": reason,
                    "message": f"{'at least ' if at_least else ''}{lost} Ray log lines of {shown} were deleted"
                    f" unshipped ({reason})",
                },
            )

    def status(self) -> RetentionStatus:
        return {
            "removed_containers": self.removed,
            "removed_sessions": self.sessions_removed,
            "lines_lost": self.lines_lost,
            "orphans": len(self.orphan_since),
        }
