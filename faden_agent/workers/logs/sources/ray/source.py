"""Ray log files: Serve's and Ray's own (raylet, GCS, core workers, monitor, dashboard) under
<RAY_LOG_DIR>/<container name>/session_*/logs, hostile input read through mount.py. RaySource
is the loop: list what changed (tree.py), read and ship (tailing.py), wait for inotify or the
next round; a full listing every RESCAN_S; retention of the directory (retention.py).
"""

from __future__ import annotations

import os
import time

from faden_agent.workers.logs.sources import RAY, Shared
from faden_agent.workers.logs.sources.managed import ManagedNames
from faden_agent.workers.logs.sources.ray import tree
from faden_agent.workers.logs.sources.ray.inotify import TreeWatch
from faden_agent.workers.logs.sources.ray.retention import Retention
from faden_agent.workers.logs.sources.ray.tailing import POLL_S
from faden_agent.workers.logs.sources.ray.tree import RayTree

RESCAN_S = 60.0  # a full listing although no event came: the safety net
ROOT_POLL_S = 5.0  # neither the Ray log directory nor its parent exists yet
MAX_WATCHED_DIRS_PER_CONTAINER = 256  # a container dir and its newest 85 sessions' session, logs, serve


class RaySource(RayTree):
    kind = RAY.name

    def __init__(self, shared: Shared, managed: ManagedNames) -> None:
        super().__init__(shared)
        self.retention = Retention(self, managed.present)
        managed.when_removed(self.container_removed)

    def follow(self) -> None:
        self.close_all()
        if self.watch is not None:
            self.watch.close()
        self.watch = TreeWatch(MAX_WATCHED_DIRS_PER_CONTAINER)
        first, list_again = True, True
        try:
            while not self.stop_event.is_set():
                started = time.monotonic()
                if list_again:
                    dirty = self.watch.take_dirty()
                    if dirty is not None:
                        dirty |= self.deferred | self.relist_now()
                    self.deferred = set()
                    if first or self.watch.polling or started >= self.full_at + RESCAN_S:
                        dirty, self.relist = None, set()  # the full listing: the safety net for what no event told
                    root_fd = self.open_root(full=dirty is None)
                    if root_fd is not None:
                        try:
                            if not self.drain_detached(root_fd):
                                return
                            self.scan(root_fd, first, dirty)
                            first = False
                            if dirty is None:
                                self.retention.check(root_fd)
                        finally:
                            os.close(root_fd)
                more = self.read_round()
                if more is None or not self.send_due():
                    return
                if self.retention.wanted:
                    self.check_retention()
                list_again = self.wait(started, more)
        finally:
            self.close_all()

    def wait(self, round_started: float, more: bool) -> bool:
        """Until there is work: whether directories are to be listed again (False: only
        tailed files grew). At most one round per POLL_S."""
        assert self.watch is not None
        self.stop_event.wait(max(0.0, round_started + POLL_S - time.monotonic()))
        if self.stop_event.is_set() or self.watch.polling:
            return True
        if self.deferred or self.rooms(self.relist):
            return True  # changes a debt held back, or files left unopened that now have room
        if more or any(not t.at_eof for t in self.tails.values()):
            return bool(self.watch.wait(0))  # data left to read: read on, listing only what changed
        if not self.root_watched:
            self.stop_event.wait(ROOT_POLL_S)
            return True
        now = time.monotonic()
        timeout = self.full_at + RESCAN_S - now
        due = self.next_due()
        if due is not None:
            timeout = min(timeout, due - now)  # a held entry's wait bound ends first
        changed = self.watch.wait(max(0.0, timeout))
        if changed is None:  # timed out: a held entry is due, or the safety-net listing
            return time.monotonic() >= self.full_at + RESCAN_S
        return changed

    def stop(self) -> None:
        if self.watch is not None:
            self.watch.wake()

    def container_removed(self, name: str) -> None:
        """A managed container is gone (the container source's thread): its directory is
        checked for retention at once, not at the next full listing."""
        self.retention.container_removed(name)
        if self.watch is not None:
            self.watch.wake()

    def check_retention(self) -> None:
        root_fd = tree.open_own_dir(self.config.ray_log_dir)
        if root_fd is not None:
            try:
                self.retention.check(root_fd)
            finally:
                os.close(root_fd)

    def status(self) -> dict[str, object]:
        return {
            **super().status(),
            "files": len(self.tails),
            "watching": self.watch.status() if self.watch is not None else None,
            "scans": dict(self.scans),
            "nul_bytes_skipped": self.nul_bytes_skipped,
            "closed_idle": self.closed_idle,
            "retention": self.retention.status(),
            "positions_quarantined": self.positions_quarantined,
            "dirs_opened": self.dirs_opened,
            "rotations": self.rotations,
            "truncations": self.truncations,
            **self.refusals.status(),
        }
