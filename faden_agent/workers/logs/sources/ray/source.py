"""Ray log files: Serve's and Ray's own (raylet, GCS, core workers, monitor, dashboard) under
<RAY_LOG_DIR>/<container name>/session_*/logs, hostile input read through mount.py; each
file tailed by device+inode and offset, rotations followed, lines joined into entries.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import threading
import time

from faden_agent.config import Config
from faden_agent.workers.logs.backlog import Backlog
from faden_agent.workers.logs.entry import MAX_LINE_BYTES, Entry, clean_line
from faden_agent.workers.logs.labels import LabelMaker
from faden_agent.workers.logs.multiline import Joined, Joiner
from faden_agent.workers.logs.positions import Positions
from faden_agent.workers.logs.report import report_event
from faden_agent.workers.logs.sources import FIRST_START_WINDOW_S, RAY, ROTATED_BEFORE_READ, Source
from faden_agent.workers.logs.sources.managed import ManagedNames
from faden_agent.workers.logs.sources.ray import mount
from faden_agent.workers.logs.sources.ray.fileends import KEY_PREFIX, FileEnds, position_key
from faden_agent.workers.logs.sources.ray.inotify import TreeWatch
from faden_agent.workers.logs.sources.ray.mount import Refused, safe_name
from faden_agent.workers.logs.sources.ray.refusals import Refusals
from faden_agent.workers.logs.sources.ray.retention import Retention
from faden_agent.workers.logs.sources.ray.tail import ReadBudget, Tail, parse_ray_ts_ns, rotation_of

POLL_S = 0.5  # at most one round this often; the poll interval where inotify cannot serve
RESCAN_S = 60.0  # a full listing although no event came: the safety net
ROOT_POLL_S = 5.0  # neither the Ray log directory nor its parent exists yet
MAX_WATCHED_DIRS_PER_CONTAINER = 256  # a container dir and its newest 85 sessions' session, logs, serve
FORGET_AFTER_S = 300.0
READ_CHUNK = 256 * 1024
READ_RATE_BYTES = 4 * 1024 * 1024  # per container and second (one second's worth may be saved up)
MAX_OPEN_PER_CONTAINER = 128  # files tailed at once per container (Ray's own: ~3 per worker process)
# Listing is paid from the container's read budget: a directory opened and each entry listed.
LIST_DIR_COST = 4 * 1024
LIST_ENTRY_COST = 256
SESSION_PATH = ("logs", "serve")  # below each session_* directory (Ray's own files in logs/)
RAY_OWN_SYMLINK = "session_latest"  # Ray's own link to the current session: expected, not followed
_CONTAINER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}\Z")  # Docker's names, bounded
log = logging.getLogger(__name__)


def _open_dir(path: str | os.PathLike[str]) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None


class RaySource(Source):
    kind = RAY.name

    def __init__(
        self,
        config: Config,
        backlog: Backlog,
        positions: Positions,
        labels: LabelMaker,
        stop_event: threading.Event,
        managed: ManagedNames,
    ) -> None:
        super().__init__(config, backlog, positions, labels, stop_event)
        self.tails: dict[tuple[int, int], Tail] = {}
        # Files read to their end (or skipped): ident -> (mtime then, last seen in a scan).
        self.finished: dict[tuple[int, int], tuple[int, float]] = {}
        self.rotations = 0
        self.truncations = 0
        self.budget = ReadBudget(READ_RATE_BYTES)
        self.refusals = Refusals(self.config)
        self.watch: TreeWatch | None = None
        self.root_watched = False  # the Ray log directory (or its parent) is watched
        self.full_at = 0.0  # the last full listing (monotonic)
        self.known_dirs: set[tuple[str, ...]] = set()  # directories listed (a change lists one again)
        self.scans = {"full": 0, "partial": 0}
        self.retention = Retention(self, managed.present)
        managed.when_removed(self.container_removed)
        self.nul_bytes_skipped = 0
        self.closed_idle = 0  # files closed to make room for others (MAX_OPEN_PER_CONTAINER)
        self.relist: set[tuple[str, ...]] = set()  # directories with files left unopened: listed once there is room
        self.deferred: set[tuple[str, ...]] = set()  # changed directories of a container in debt: listed once paid
        self.positions_quarantined = 0
        self.dirs_opened = 0
        self.ends = FileEnds(self.positions)
        # Files closed for room, read to the offset given: their end should they turn up rotated unchanged.
        self.closed_ends: dict[tuple[int, int], int] = {}

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

    def has_room(self, container: str) -> bool:
        """Whether a file of the container can be opened now: fewer are open than the bound,
        or one of them is read to its end (close_idle makes room)."""
        mine = [tail for tail in self.tails.values() if tail.container == container]
        return len(mine) < MAX_OPEN_PER_CONTAINER or any(tail.read_all for tail in mine)

    def rooms(self, dirs: set[tuple[str, ...]]) -> set[str]:
        """The containers of `dirs` that have room for another file."""
        return {container for container in {parts[0] for parts in dirs} if self.has_room(container)}

    def relist_now(self) -> set[tuple[str, ...]]:
        """The directories with files left unopened whose container has room now: listed
        again this round; the others wait (for room, or the full listing)."""
        rooms = self.rooms(self.relist)
        now = {parts for parts in self.relist if parts[0] in rooms}
        self.relist -= now
        return now

    def check_retention(self) -> None:
        root_fd = _open_dir(self.config.ray_log_dir)
        if root_fd is not None:
            try:
                self.retention.check(root_fd)
            finally:
                os.close(root_fd)

    def open_root(self, full: bool) -> int | None:
        """The agent's own directory (not container-controlled); None until it exists, and
        then its parent is watched for its creation."""
        assert self.watch is not None
        if full:
            self.watch.begin_listing()
            self.full_at = time.monotonic()
        self.root_watched = False
        fd = _open_dir(self.config.ray_log_dir)
        if fd is None:
            parent_fd = _open_dir(os.path.dirname(self.config.ray_log_dir) or ".")
            if parent_fd is None:
                return None
            try:
                self.watch.watch_dir(parent_fd, ())
            finally:
                os.close(parent_fd)
            # Made between the first try and the watch, it would send no event: try again.
            fd = _open_dir(self.config.ray_log_dir)
        if fd is not None:
            self.watch.watch_dir(fd, ())
        self.root_watched = True
        return fd

    # --- finding files

    def scan(self, root_fd: int, first: bool, dirty: set[tuple[str, ...]] | None) -> None:
        """Open files not tailed yet, including files that rotated away more than once
        between two scans; `dirty` names the directories to list (None: all of them).
        Renames during a listing can hide a file from it, so the listing repeats until it
        finds nothing new: all of them are open before any is read. `scans` counts the
        listings done (a test starts writing once the first one is)."""
        present: set = set()
        listed: set[tuple[str, ...]] = set()
        for _ in range(10):
            known = len(self.tails) + len(self.finished)
            present = set()
            for parts, logs_fd, device, core in self.log_dirs(root_fd, dirty, listed):
                present |= self.open_log_files(parts, logs_fd, device, first, core)
            if len(self.tails) + len(self.finished) == known:
                break
        self.known_dirs = listed if dirty is None else self.known_dirs | listed
        now = time.monotonic()
        for ident in present & self.finished.keys():
            self.finished[ident] = (self.finished[ident][0], now)
        if dirty is None:
            # Forget finished files only after a while unseen by full listings: a rename during
            # one can hide a file from it, and forgetting it then would read it twice.
            kept = {i: seen for i, seen in self.finished.items() if now - seen[1] < FORGET_AFTER_S}
            for ident in self.finished.keys() - kept.keys():
                self.closed_ends.pop(ident, None)
                if ident not in self.tails:
                    self.ends.forget_complete(position_key(ident))
            self.finished = kept
        if first:
            keys = {position_key(ident) for ident in present}
            gone = [key for key in self.positions.keys(KEY_PREFIX) if key not in keys]
            lost = sum(self.ends.gone(key) for key in gone)  # each position forgotten: its file is gone
            self.ends.forget_orphans()
            if lost:  # how many lines each held past its position, nobody can say now
                self.lost(lost, ROTATED_BEFORE_READ, at_least=True)
        self.scans["full" if dirty is None else "partial"] += 1

    def children(self, dir_fd: int, parts: tuple[str, ...], dirty, prefixes) -> list[str]:
        """Names below `parts` to look at: all of them (listed) when the directory is new
        to us, changed, or this is a full listing; else only those on the way to a change."""
        self.dirs_opened += 1
        if dirty is None or parts in dirty or parts not in self.known_dirs:
            entries = self.listing(dir_fd, parts)
            if not parts:  # the agent's own directory: plain files there are nobody's logs
                return [e.name for e in entries if e.is_dir(follow_symlinks=False) or e.is_symlink()]
            return [e.name for e in entries]
        depth = len(parts)
        return sorted({d[depth] for d in prefixes if len(d) > depth and d[:depth] == parts})

    def log_dirs(self, root_fd: int, dirty: set[tuple[str, ...]] | None, listed: set[tuple[str, ...]]):
        """(parts, descriptor, device, core) of each <container>/session_*/logs to list (core:
        Ray's own files) and its serve/ directory; each descriptor is closed when the caller
        asks for the next one. Newest sessions first (they get the watches)."""
        if dirty is not None and not dirty:
            return
        prefixes = None if dirty is None else {d[:i] for d in dirty for i in range(len(d) + 1)}
        assert self.watch is not None
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
            if dirty is not None and not self.budget.take(name, 0, peek=True):
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

    def descend(self, parts: tuple[str, ...], parent_fd: int, device: int, dirty, listed: set[tuple[str, ...]]):
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
                self.budget.charge(parts[0], LIST_DIR_COST)
                fds.append(fd)
                assert self.watch is not None
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
            self.budget.charge(parts[0], LIST_DIR_COST + LIST_ENTRY_COST * len(found))
        return sorted(found, key=lambda e: e.name)

    def open_log_files(self, parts: tuple[str, ...], dir_fd: int, device: int, first: bool, core: bool) -> set:
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
        if sum(t.container == container for t in self.tails.values()) >= MAX_OPEN_PER_CONTAINER:
            known = mount.identity_at(serve_fd, (parts[-1],))
            if known in self.tails or (known in self.finished and not self.changed(known, serve_fd, parts)):
                return known
            if not self.close_idle(container):
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
        if ident in self.tails or self.finished.get(ident, (None,))[0] == st.st_mtime_ns:
            os.close(fd)
            if rotated and ident in self.closed_ends:  # closed for room, then rotated unwritten
                self.ends.record(key, self.closed_ends.pop(ident))
            return ident
        self.closed_ends.pop(ident, None)  # written since it was closed
        path = self.relpath(parts)
        # A file closed while idle (or read to its end after a rotation) resumes where it was.
        stored = self.positions.get(key) if first or ident in self.finished else None
        if isinstance(stored, dict) and stored.get("path", path) != path and not rotated:
            stored = None  # the inode now names another file
        if not rotated and self.ends.known(key):  # a rotated-away file's inode, reused by a live one
            if not self.ends.complete(key):
                self.lost(1, ROTATED_BEFORE_READ, at_least=True)
            self.ends.drop(key)
            stored = None
        # A rotated file without a position is older than the agent's first start, unless
        # written after the agent's last save: then it rotated while the agent was stopped.
        saved_ns = self.positions.loaded_mtime_ns
        if first and rotated and stored is None and (saved_ns is None or st.st_mtime_ns <= saved_ns):
            os.close(fd)
            self.finished[ident] = (st.st_mtime_ns, time.monotonic())  # rotated before we started
            return ident
        resume = self.stored_position(key, stored, parts) if stored is not None else None
        if resume is not None:
            offset, ts_ns = resume[0], resume[1] or st.st_mtime_ns
        else:  # a new file (or, after start, one that rotated away before a scan saw it)
            old = first and st.st_mtime < time.time() - FIRST_START_WINDOW_S
            offset, ts_ns = (st.st_size if old else 0), st.st_mtime_ns
            self.positions.initialize(key, {"offset": offset, "ts": ts_ns, "path": path}, replace=True)
            self.ends.drop(key)  # a reused inode's
        filename = parts[-1]
        self.tails[ident] = Tail(
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
            wd=self.watch.watch_file(fd) if self.watch is not None else None,
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
        return (st.st_dev, st.st_ino) == ident and st.st_mtime_ns != self.finished[ident][0]

    def close_idle(self, container: str) -> bool:
        """Make room: close the container's least recently written file that is read to its
        end (its position stays; a full listing reopens it when it is written again)."""
        idle = [t for t in self.tails.values() if t.container == container and t.read_all]
        if not idle:
            return False
        tail = min(idle, key=lambda t: os.fstat(t.fd).st_mtime_ns)
        self.finished[tail.ident] = (os.fstat(tail.fd).st_mtime_ns, time.monotonic())
        self.close(tail)
        self.closed_idle += 1
        return True

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

    # --- reading

    def oldest_first(self) -> list[Tail]:
        """Tails by last write: a rotated file's lines go out before its successor's."""
        return sorted(self.tails.values(), key=lambda tail: os.fstat(tail.fd).st_mtime_ns)

    def drain_detached(self, root_fd: int) -> bool:
        """Read rotated-away (renamed or deleted) files to their end, then close them."""
        for tail in self.oldest_first():
            ident = tail.ident
            if mount.identity_at(root_fd, tail.parts) == ident:
                continue
            tail.final = True
            if not self.read(tail):
                return False
            if not tail.at_eof:
                continue  # its read budget ran out: finished on a later round
            if tail.pending and not self.ship(tail, tail.pending, len(tail.pending)):
                return False
            joined = tail.joiner.flush()  # its successor starts afresh
            if joined is not None and not self.put(tail, joined):
                return False
            self.rotations += 1
            self.finished[ident] = (os.fstat(tail.fd).st_mtime_ns, time.monotonic())
            self.close(tail)
        return True

    def close(self, tail: Tail) -> None:
        """Stop tailing a file, leaving its end: a rotated-away file's, for the check after a
        restart; a live one read to its end, should it turn up rotated without a write."""
        if tail.final:
            self.ends.record(tail.key, tail.put_offset if tail.read_all else os.fstat(tail.fd).st_size)
        elif tail.read_all:
            self.closed_ends[tail.ident] = tail.put_offset
        if self.watch is not None:
            self.watch.unwatch_file(tail.wd)
        os.close(tail.fd)
        del self.tails[tail.ident]

    def read_round(self) -> bool | None:
        """Read the files for at most POLL_S, one chunk per file in turn, so one huge file
        does not hold up the others; files of one rotation group (x.log.2, x.log.1, x.log)
        strictly oldest first; each container within its read budget. Returns whether data
        is left to read now (the round ended on time), None when the backlog closed."""
        groups: dict[tuple[str, ...], list[Tail]] = {}
        for tail in self.oldest_first():
            groups.setdefault((*tail.parts[:-1], tail.group), []).append(tail)
        deadline = time.monotonic() + POLL_S  # then drain and scan again: rotations, new files
        while groups and not self.stop_event.is_set():
            if time.monotonic() >= deadline:
                return True
            for key, tails in list(groups.items()):
                tail = tails[0]
                if not self.read(tail, max_chunks=1):
                    return None
                if tail.at_eof:
                    tails.pop(0)
                    joined = tail.joiner.flush() if tails else None  # its successor's lines come next
                    if joined is not None and not self.put(tail, joined):
                        return None
                if not tails or not tail.at_eof and not self.budget.take(tail.container, 0, peek=True):
                    del groups[key]  # done, or its container's budget is spent until the next poll
        return False

    def read(self, tail: Tail, max_chunks: int | None = None) -> bool:
        """Read what the budget allows (at most max_chunks chunks); False when the backlog closed."""
        size = os.fstat(tail.fd).st_size
        if size < tail.offset:
            log.info("logs: %s was truncated; reading it again from the start", tail.path)
            self.truncations += 1
            if tail.seen_size > tail.offset + len(tail.pending) and not self.copied(tail):
                self.lost(1, ROTATED_BEFORE_READ, at_least=True)  # lines we saw in it, unread
            tail.offset, tail.pending = 0, b""
        tail.seen_size, tail.looked_at = size, time.monotonic()
        tail.at_eof = False
        chunks = 0
        while max_chunks is None or chunks < max_chunks:
            chunks += 1
            if not self.skip_hole(tail, size):
                return False
            want = self.budget.take(tail.container, READ_CHUNK)
            if not want:
                return True
            data = os.pread(tail.fd, want, tail.offset + len(tail.pending))
            self.budget.refund(tail.container, want - len(data))
            if not data:
                tail.at_eof = True
                return True
            *lines, tail.pending = (tail.pending + data).split(b"\n")
            for line in lines:
                if not self.ship(tail, line, len(line) + 1):
                    return False
            if len(tail.pending) > MAX_LINE_BYTES:  # a line without end: ship what we have
                if not self.ship(tail, tail.pending, len(tail.pending)):
                    return False
                tail.pending = b""
        return True

    def copied(self, truncated: Tail) -> bool:
        """Whether a file of the truncated one's rotation group, opened since it was last
        looked at, holds as much as was seen of it: copytruncate's copy under a name we
        follow, read from its start (its lines come, some twice: none lost)."""
        return any(
            other is not truncated
            and other.parts[:-1] == truncated.parts[:-1]
            and other.group == truncated.group
            and other.opened_at >= truncated.looked_at
            and os.fstat(other.fd).st_size >= truncated.seen_size
            for other in self.tails.values()
        )

    def skip_hole(self, tail: Tail, size: int) -> bool:
        """Jump over a hole (a sparse file's unwritten range reads as NUL bytes) without
        reading it: counted as NUL bytes skipped; an unfinished line before it ends there."""
        at = tail.offset + len(tail.pending)
        if at >= size:
            return True
        try:
            data_at = os.lseek(tail.fd, at, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                return True  # no hole support here: the NUL bytes are read and dropped instead
            data_at = size  # nothing but a hole up to the end
        if data_at <= at:
            return True
        if tail.pending and not self.ship(tail, tail.pending, len(tail.pending)):
            return False
        self.nul_bytes_skipped += data_at - at
        tail.offset = data_at
        return True

    def ship(self, tail: Tail, line: bytes, consumed: int) -> bool:
        """One line read: to the tail's joiner, and what it completed to the backlog. NUL
        bytes are dropped (counted): a run of them is never shipped."""
        if consumed == len(line):  # the pending rest: it is no longer pending
            tail.pending = b""
        if b"\0" in line:
            kept = line.replace(b"\0", b"")
            self.nul_bytes_skipped += len(line) - len(kept)
            line = kept
            if not line.strip():
                tail.offset += consumed
                return True
        ts_ns = parse_ray_ts_ns(line) or tail.ts_ns
        offset = tail.offset + consumed
        position = {"offset": offset, "ts": ts_ns, "path": tail.path}
        for joined in tail.joiner.add(clean_line(line), ts_ns, position, time.monotonic()):
            if not self.put(tail, joined):
                return False
        tail.offset, tail.ts_ns = offset, ts_ns
        self.lines_read += 1
        return True

    def put(self, tail: Tail, joined: Joined) -> bool:
        """An entry into the backlog; its position is the offset after its last line."""
        entry = Entry(
            tail.labels_by_level[joined.level], joined.ts_ns, joined.text, tail.metadata, tail.key, joined.last_position
        )
        tail.put_offset = joined.last_position["offset"]
        return self.backlog.put(entry)

    def send_due(self) -> bool:
        """Held entries whose wait bound passed; False when the backlog closed."""
        now = time.monotonic()
        for tail in list(self.tails.values()):
            joined = tail.joiner.due(now)
            if joined is not None and not self.put(tail, joined):
                return False
        return True

    def next_due(self) -> float | None:
        deadlines = [d for tail in self.tails.values() if (d := tail.joiner.deadline) is not None]
        return min(deadlines) if deadlines else None

    def forget_tail(self, ident: tuple[int, int]) -> None:
        """Stop tailing a file that is about to be deleted, and forget its position."""
        tail = self.tails.pop(ident)
        if self.watch is not None:
            self.watch.unwatch_file(tail.wd)
        os.close(tail.fd)
        self.positions.forget(tail.key)

    def close_all(self) -> None:
        for tail in list(self.tails.values()):
            self.close(tail)

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
