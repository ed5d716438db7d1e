"""Finding Ray log files (the Ray source's middle): <container>/session_*/logs (Ray's own
files) and logs/serve (Serve's) listed through mount.py's hostile-input checks and watched
with inotify, only the directories that changed (or all of them at the full listing); new
files opened for tailing (tailing.py) at their stored position. Listing is paid from the
container's read budget; files left unopened for room wait for room or the full listing.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterator

from faden_agent.config import Config
from faden_agent.workers.logs.labels import LabelMaker
from faden_agent.workers.logs.multiline import Joiner
from faden_agent.workers.logs.positions import Positions
from faden_agent.workers.logs.report import report_event
from faden_agent.workers.logs.sources import FIRST_START_WINDOW_S, ROTATED_BEFORE_READ
from faden_agent.workers.logs.sources.ray import mount
from faden_agent.workers.logs.sources.ray.fileends import KEY_PREFIX, position_key
from faden_agent.workers.logs.sources.ray.inotify import TreeWatch
from faden_agent.workers.logs.sources.ray.mount import Refused, safe_name
from faden_agent.workers.logs.sources.ray.refusals import Refusals
from faden_agent.workers.logs.sources.ray.tail import Tail, rotation_of
from faden_agent.workers.logs.sources.ray.tailing import Losses, RayTails

FORGET_AFTER_S = 300.0  # a finished file unseen by full listings this long is forgotten
# Listing is paid from the container's read budget: a directory opened and each entry listed.
LIST_DIR_COST = 4 * 1024
LIST_ENTRY_COST = 256
SESSION_PATH = ("logs", "serve")  # below each session_* directory (Ray's own files in logs/)
RAY_OWN_SYMLINK = "session_latest"  # Ray's own link to the current session: expected, not followed
_CONTAINER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}\Z")  # Docker's names, bounded
log = logging.getLogger(__name__)
Parts = tuple[str, ...]  # a path below the Ray log directory, by name: (container, session, ...)
LogDir = tuple[Parts, int, int, bool]  # (parts, open descriptor, device, core: Ray's own logs/)


def open_own_dir(path: str | os.PathLike[str]) -> int | None:
    """The agent's own directory (not container-controlled); None when it does not exist."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None


class RayTree:
    """The Ray log directory as found: what was listed, what is watched (`watch`), what was
    refused; new files are opened into `tailing` at their stored position."""

    def __init__(
        self,
        config: Config,
        positions: Positions,
        labels: LabelMaker,
        tailing: RayTails,
        watch: TreeWatch,
        lost: Losses,
    ) -> None:
        self.config = config
        self.positions = positions
        self.labels = labels
        self.tailing = tailing
        self.watch = watch
        self.lost = lost
        self.refusals = Refusals(config)
        self.root_watched = False  # the Ray log directory (or its parent) is watched
        self.full_at = 0.0  # the last full listing (monotonic)
        self.known_dirs: set[tuple[str, ...]] = set()  # directories listed (a change lists one again)
        self.scans = {"full": 0, "partial": 0}
        self.relist: set[tuple[str, ...]] = set()  # directories with files left unopened: listed once there is room
        self.deferred: set[tuple[str, ...]] = set()  # changed directories of a container in debt: listed once paid
        self.positions_quarantined = 0
        self.dirs_opened = 0

    def rooms(self, dirs: set[tuple[str, ...]]) -> set[str]:
        """The containers of `dirs` that have room for another file."""
        return {container for container in {parts[0] for parts in dirs} if self.tailing.has_room(container)}

    def relist_now(self) -> set[tuple[str, ...]]:
        """The directories with files left unopened whose container has room now: listed
        again this round; the others wait (for room, or the full listing)."""
        rooms = self.rooms(self.relist)
        now = {parts for parts in self.relist if parts[0] in rooms}
        self.relist -= now
        return now

    def to_list(self, changed: set[Parts] | None, full: bool) -> set[Parts] | None:
        """The directories to list this round: those that `changed` (None: all), those a debt
        held back and those with files left unopened whose container has room now; with
        `full`, all of them (None)."""
        if changed is not None:
            changed |= self.deferred | self.relist_now()
        self.deferred = set()
        if full:
            changed, self.relist = None, set()
        return changed

    def open_root(self, full: bool) -> int | None:
        """The agent's own directory (not container-controlled); None until it exists, and
        then its parent is watched for its creation."""
        if full:
            self.watch.begin_listing()
            self.full_at = time.monotonic()
        self.root_watched = False
        fd = open_own_dir(self.config.ray_log_dir)
        if fd is None:
            parent_fd = open_own_dir(os.path.dirname(self.config.ray_log_dir) or ".")
            if parent_fd is None:
                return None
            try:
                self.watch.watch_dir(parent_fd, ())
            finally:
                os.close(parent_fd)
            # Made between the first try and the watch, it would send no event: try again.
            fd = open_own_dir(self.config.ray_log_dir)
        if fd is not None:
            self.watch.watch_dir(fd, ())
        self.root_watched = True
        return fd

    def scan(self, root_fd: int, first: bool, dirty: set[tuple[str, ...]] | None) -> None:
        """Open files not tailed yet, including files that rotated away more than once
        between two scans; `dirty` names the directories to list (None: all of them).
        Renames during a listing can hide a file from it, so the listing repeats until it
        finds nothing new: all of them are open before any is read. `scans` counts the
        listings done (a test starts writing once the first one is)."""
        present: set = set()
        listed: set[tuple[str, ...]] = set()
        for _ in range(10):
            known = len(self.tailing.tails) + len(self.tailing.finished)
            present = set()
            for parts, logs_fd, device, core in self.log_dirs(root_fd, dirty, listed):
                present |= self.open_log_files(parts, logs_fd, device, first, core)
            if len(self.tailing.tails) + len(self.tailing.finished) == known:
                break
        self.known_dirs = listed if dirty is None else self.known_dirs | listed
        self.tailing.seen(present)
        if dirty is None:
            # Forget finished files only after a while unseen by full listings: a rename during
            # one can hide a file from it, and forgetting it then would read it twice.
            self.tailing.forget_unseen(FORGET_AFTER_S)
        if first:
            keys = {position_key(ident) for ident in present}
            gone = [key for key in self.positions.keys(KEY_PREFIX) if key not in keys]
            lost = sum(self.tailing.ends.gone(key) for key in gone)  # each position forgotten: its file is gone
            self.tailing.ends.forget_orphans()
            if lost:  # how many lines each held past its position, nobody can say now
                self.lost(lost, ROTATED_BEFORE_READ, at_least=True)
        self.scans["full" if dirty is None else "partial"] += 1

    def children(self, dir_fd: int, parts: Parts, dirty: set[Parts] | None, prefixes: set[Parts] | None) -> list[str]:
        """Names below `parts` to look at: all of them (listed) when the directory is new
        to us, changed, or this is a full listing; else only those on the way to a change."""
        self.dirs_opened += 1
        if dirty is None or prefixes is None or parts in dirty or parts not in self.known_dirs:
            entries = self.listing(dir_fd, parts)
            if not parts:  # the agent's own directory: plain files there are nobody's logs
                return [e.name for e in entries if e.is_dir(follow_symlinks=False) or e.is_symlink()]
            return [e.name for e in entries]
        depth = len(parts)
        return sorted({d[depth] for d in prefixes if len(d) > depth and d[:depth] == parts})

    def log_dirs(self, root_fd: int, dirty: set[Parts] | None, listed: set[Parts]) -> Iterator[LogDir]:
        """(parts, descriptor, device, core) of each <container>/session_*/logs to list (core:
        Ray's own files) and its serve/ directory; each descriptor is closed when the caller
        asks for the next one. Newest sessions first (they get the watches)."""
        if dirty is not None and not dirty:
            return
        prefixes = None if dirty is None else {d[:i] for d in dirty for i in range(len(d) + 1)}
        listed.add(())
        for name in self.children(root_fd, (), dirty, prefixes):
            if not _CONTAINER_NAME.match(name):
                self.refusals.refuse((name,), "bad_name")
                continue
            try:
                container_fd, device = mount.open_dir(name, root_fd, None)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except Refused as refused:
                self.refusals.refuse((name,), refused.reason)
                continue
            if dirty is not None and not self.tailing.budget.take(name, 0, peek=True):
                os.close(container_fd)  # in debt for listing: its changes wait until it is paid
                self.deferred |= {parts for parts in dirty if parts[:1] == (name,)}
                continue
            self.watch.watch_dir(container_fd, (name,))
            listed.add((name,))
            try:
                sessions = self.children(container_fd, (name,), dirty, prefixes)
                for session in sorted(sessions, reverse=True):
                    here = (name, session)
                    if not session.startswith("session_") or session == RAY_OWN_SYMLINK:
                        continue  # Ray's own link to the current session: expected, not followed
                    if prefixes is None or here in prefixes or here not in self.known_dirs:
                        yield from self.descend(here, container_fd, device, dirty, listed)
            finally:
                os.close(container_fd)

    def descend(
        self, parts: Parts, parent_fd: int, device: int, dirty: set[Parts] | None, listed: set[Parts]
    ) -> Iterator[LogDir]:
        """Open parts[-1] under parent_fd, then SESSION_PATH below it; yields logs/ (core) and
        logs/serve/ where they are to be listed."""
        fds: list[int] = []
        try:
            fd = parent_fd
            names = (parts[-1], *SESSION_PATH)
            for depth, name in enumerate(names):
                here = (*parts[:-1], *names[: depth + 1])
                try:
                    fd, _ = mount.open_dir(name, fd, device)
                except (FileNotFoundError, NotADirectoryError):
                    return
                except Refused as refused:
                    self.refusals.refuse(here, refused.reason)
                    return
                self.dirs_opened += 1
                self.tailing.budget.charge(parts[0], LIST_DIR_COST)
                fds.append(fd)
                self.watch.watch_dir(fd, here)
                listed.add(here)
                if depth and (dirty is None or here in dirty or here not in self.known_dirs):
                    yield here, fd, device, depth == 1
        finally:
            for fd in fds:
                os.close(fd)

    def listing(self, dir_fd: int, parts: tuple[str, ...]) -> list[os.DirEntry]:
        found: list[os.DirEntry] = []
        try:
            for entry in mount.entries(dir_fd):
                found.append(entry)
        except Refused as refused:
            self.refusals.refuse(parts or ("",), refused.reason)
        except OSError as exc:
            log.warning("logs: cannot list %s (%s)", self.relpath(parts), exc)
        if parts:  # below the agent's own directory: the container pays
            self.tailing.budget.charge(parts[0], LIST_DIR_COST + LIST_ENTRY_COST * len(found))
        return sorted(found, key=lambda e: e.name)

    def open_log_files(self, parts: Parts, dir_fd: int, device: int, first: bool, core: bool) -> set[tuple[int, int]]:
        live: list[tuple[tuple[str, int], str]] = []
        rotated: list[tuple[tuple[str, int], str]] = []
        for entry in self.listing(dir_fd, parts):
            rotation = rotation_of(entry.name, core)
            if rotation is not None:
                (rotated if rotation[1] else live).append((rotation, entry.name))
        present = set()
        # Rotated first (oldest first: x.log.3 before x.log.2), then live: a predecessor is renamed by then.
        ordered = [*sorted(rotated, key=lambda r: (r[0][0], -r[0][1])), *live]
        for (group, number), name in ordered:
            try:
                ident = self.open((*parts, name), dir_fd, device, first, group, core, rotated=number > 0)
            except Exception as exc:  # noqa: BLE001 - one file's trouble stops that file alone
                log.warning("logs: cannot tail %s (%s)", repr(self.relpath((*parts, name)))[:200], exc)
                self.refusals.refuse((*parts, name), "unreadable")
                continue
            if ident is not None:
                present.add(ident)
        return present

    def open(
        self, parts: tuple[str, ...], serve_fd: int, device: int, first: bool, group: str, core: bool, rotated: bool
    ) -> tuple[int, int] | None:
        container = parts[0]
        if self.tailing.at_bound(container):
            known = mount.identity_at(serve_fd, (parts[-1],))
            tailing = self.tailing
            if known in tailing.tails or (known in tailing.finished and not self.changed(known, serve_fd, parts)):
                return known
            if not self.tailing.close_idle(container):
                self.refusals.refuse(parts, "too_many_files")
                self.relist.add(parts[:-1])  # tried again once a file of it was read to its end
                return known
        try:  # open, then fstat: the descriptor names the file even if a rename races us
            fd, st = mount.open_file(parts[-1], serve_fd, device)
        except FileNotFoundError:
            return None
        except Refused as refused:
            self.refusals.refuse(parts, refused.reason)
            return None
        ident = (st.st_dev, st.st_ino)
        key = position_key(ident)
        if ident in self.tailing.tails or self.tailing.finished.get(ident, (None,))[0] == st.st_mtime_ns:
            os.close(fd)
            if rotated and ident in self.tailing.closed_ends:  # closed for room, then rotated unwritten
                self.tailing.ends.record(key, self.tailing.closed_ends.pop(ident))
            return ident
        self.tailing.closed_ends.pop(ident, None)  # written since it was closed
        path = self.relpath(parts)
        # A file closed while idle (or read to its end after a rotation) resumes where it was.
        stored = self.positions.get(key) if first or ident in self.tailing.finished else None
        if isinstance(stored, dict) and stored.get("path", path) != path and not rotated:
            stored = None  # the inode now names another file
        if not rotated and self.tailing.ends.known(key):  # a rotated-away file's inode, reused by a live one
            if not self.tailing.ends.complete(key):
                self.lost(1, ROTATED_BEFORE_READ, at_least=True)
            self.tailing.ends.drop(key)
            stored = None
        # A rotated file without a position is older than the agent's first start, unless
        # written after the agent's last save: then it rotated while the agent was stopped.
        saved_ns = self.positions.loaded_mtime_ns
        if first and rotated and stored is None and (saved_ns is None or st.st_mtime_ns <= saved_ns):
            os.close(fd)
            self.tailing.finished[ident] = (st.st_mtime_ns, time.monotonic())  # rotated before we started
            return ident
        resume = self.stored_position(key, stored, parts) if stored is not None else None
        if resume is not None:
            offset, ts_ns = resume[0], resume[1] or st.st_mtime_ns
        else:  # a new file (or, after start, one that rotated away before a scan saw it)
            old = first and st.st_mtime < time.time() - FIRST_START_WINDOW_S
            offset, ts_ns = (st.st_size if old else 0), st.st_mtime_ns
            self.positions.initialize(key, {"offset": offset, "ts": ts_ns, "path": path}, replace=True)
            self.tailing.ends.drop(key)  # a reused inode's
        filename = parts[-1]
        self.tailing.tails[ident] = Tail(
            parts=parts,
            path=path,
            fd=fd,
            ident=ident,
            offset=offset,
            ts_ns=ts_ns,
            labels_by_level=self.labels.ray_file(container, filename, core),
            joiner=Joiner(self.config.log_multiline, self.config.log_multiline_wait_sec),
            group=group,
            metadata={"filename": safe_name(group), "session": safe_name(parts[1])},
            wd=self.watch.watch_file(fd),
            final=rotated,
            put_offset=offset,
        )
        return ident

    def changed(self, ident: tuple[int, int], dir_fd: int, parts: tuple[str, ...]) -> bool:
        """Whether a finished file was written since (its modification time moved)."""
        try:
            st = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == ident and st.st_mtime_ns != self.tailing.finished[ident][0]

    def stored_position(self, key: str, stored: object, parts: tuple[str, ...]) -> tuple[int, int] | None:
        """(offset, timestamp or 0) of a stored position; None, once reported and forgotten,
        when it is not one (a hand-edited or corrupt entry): that file alone starts afresh."""
        if isinstance(stored, dict):
            offset, ts_ns = stored.get("offset", 0), stored.get("ts", 0)
            if all(type(v) is int and 0 <= v < 2**63 for v in (offset, ts_ns)):
                return offset, ts_ns
        self.positions.forget(key)
        self.positions_quarantined += 1
        shown = repr(stored)[:100]
        path = repr(self.relpath(parts))[:200]
        log.warning("logs: the stored position of %s is not one (%s); the file is read as a new one", path, shown)
        report_event(
            self.config,
            {
                "type": "logs.position_quarantined",
                "container": safe_name(parts[0]),
                "path": path,
                "message": f"the stored log position of {path} was invalid ({shown}); the file is read as a new one",
            },
            record_id=f"logs-position:{key}",
        )
        return None

    def relpath(self, parts: tuple[str, ...]) -> str:
        return os.path.join(self.config.ray_log_dir, *parts)
