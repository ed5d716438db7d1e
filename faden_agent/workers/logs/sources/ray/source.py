"""Ray log files: Serve's and Ray's own (raylet, GCS, core workers, monitor, dashboard) under
<RAY_LOG_DIR>/<container name>/session_*/logs, hostile input read through mount.py. RaySource
holds its parts and is the loop: list what changed (tree.py), read and ship (tailing.py), wait
for inotify or the next round; a full listing every RESCAN_S; retention (retention.py).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from faden_agent.workers.logs.sources import RAY, Shared, Source
from faden_agent.workers.logs.sources.managed import ManagedNames
from faden_agent.workers.logs.sources.ray.inotify import TreeWatch
from faden_agent.workers.logs.sources.ray.retention import Retention
from faden_agent.workers.logs.sources.ray.tailing import POLL_S, RayTails
from faden_agent.workers.logs.sources.ray.tree import RayTree, open_own_dir

if TYPE_CHECKING:
    from faden_agent.protocol.status import SourceStatus

RESCAN_S = 60.0  # a full listing although no event came: the safety net
ROOT_POLL_S = 5.0  # neither the Ray log directory nor its parent exists yet
MAX_WATCHED_DIRS_PER_CONTAINER = 256  # a container dir and its newest 85 sessions' session, logs, serve


class RaySource(Source):
    """Holds the tree (what is listed, watched, refused), the tails (what is read, within each
    container's budget) and the retention of the directory; its own part is the loop."""

    kind = RAY.name

    def __init__(self, shared: Shared, managed: ManagedNames) -> None:
        super().__init__(shared)
        self.watch = TreeWatch(MAX_WATCHED_DIRS_PER_CONTAINER)
        self.tailing = RayTails(
            shared.backlog, shared.positions, shared.stop_event, self.line_read, self.lost, self.watch.unwatch_file
        )
        self.tree = RayTree(shared.config, shared.positions, shared.labels, self.tailing, self.watch, self.lost)
        self.retention = Retention(
            shared.config, self.tree.listing, self.tailing.shipped, self.tailing.release, managed.present
        )
        managed.when_removed(self.container_removed)

    def line_read(self) -> None:
        self.lines_read += 1

    def follow(self) -> None:
        tree, tailing = self.tree, self.tailing
        tailing.close_all()
        self.watch.start()
        first, list_again = True, True
        try:
            while not self.stop_event.is_set():
                started = time.monotonic()
                if list_again:
                    # The full listing: the safety net for what no event told.
                    full = first or self.watch.polling or started >= tree.full_at + RESCAN_S
                    dirty = tree.to_list(self.watch.take_dirty(), full)
                    root_fd = tree.open_root(full=dirty is None)
                    if root_fd is not None:
                        try:
                            if not tailing.drain_detached(root_fd):
                                return
                            tree.scan(root_fd, first, dirty)
                            first = False
                            if dirty is None:
                                self.retention.check(root_fd)
                        finally:
                            os.close(root_fd)
                more = tailing.read_round()
                if more is None or not tailing.send_due():
                    return
                if self.retention.wanted:
                    self.check_retention()
                list_again = self.wait(started, more)
        finally:
            tailing.close_all()

    def wait(self, round_started: float, more: bool) -> bool:
        """Until there is work: whether directories are to be listed again (False: only
        tailed files grew). At most one round per POLL_S."""
        tree, tailing = self.tree, self.tailing
        self.stop_event.wait(max(0.0, round_started + POLL_S - time.monotonic()))
        if self.stop_event.is_set() or self.watch.polling:
            return True
        if tree.deferred or tree.rooms(tree.relist):
            return True  # changes a debt held back, or files left unopened that now have room
        if more or any(not t.at_eof for t in tailing.tails.values()):
            return bool(self.watch.wait(0))  # data left to read: read on, listing only what changed
        if not tree.root_watched:
            self.stop_event.wait(ROOT_POLL_S)
            return True
        now = time.monotonic()
        timeout = tree.full_at + RESCAN_S - now
        due = tailing.next_due()
        if due is not None:
            timeout = min(timeout, due - now)  # a held entry's wait bound ends first
        changed = self.watch.wait(max(0.0, timeout))
        if changed is None:  # timed out: a held entry is due, or the safety-net listing
            return time.monotonic() >= tree.full_at + RESCAN_S
        return changed

    def stop(self) -> None:
        self.watch.wake()

    def container_removed(self, name: str) -> None:
        """A managed container is gone (the container source's thread): its directory is
        checked for retention at once, not at the next full listing."""
        self.retention.container_removed(name)
        self.watch.wake()

    def check_retention(self) -> None:
        root_fd = open_own_dir(self.config.ray_log_dir)
        if root_fd is not None:
            try:
                self.retention.check(root_fd)
            finally:
                os.close(root_fd)

    def status(self) -> SourceStatus:
        tree, tailing = self.tree, self.tailing
        return {
            **super().status(),
            "files": len(tailing.tails),
            "watching": self.watch.status(),
            "scans": dict(tree.scans),
            "nul_bytes_skipped": tailing.nul_bytes_skipped,
            "closed_idle": tailing.closed_idle,
            "retention": self.retention.status(),
            "positions_quarantined": tree.positions_quarantined,
            "dirs_opened": tree.dirs_opened,
            "rotations": tailing.rotations,
            "truncations": tailing.truncations,
            **tree.refusals.status(),
        }
