"""Ray Serve log files: <RAY_LOG_DIR>/<container name>/session_*/logs/serve/*.log on the host
(the executor mounts <RAY_LOG_DIR>/<container name> at protocol.RAY_LOG_MOUNT in managed
Ray containers).
Notes (why, figures, history): docs/design-notes.md.
"""

from __future__ import annotations

import calendar
import hashlib
import logging
import os
import re
import time
from dataclasses import dataclass, field

from faden_agent.workers.logs.entry import MAX_LINE_BYTES, Entry, Labels, clean_line
from faden_agent.workers.logs.report import report_event
from faden_agent.workers.logs.sources import FIRST_START_WINDOW_S, Source, mount
from faden_agent.workers.logs.sources.inotify import TreeWatch
from faden_agent.workers.logs.sources.mount import Refused, safe_name

POLL_S = 0.5  # at most one round this often; the poll interval where inotify cannot serve
RESCAN_S = 60.0  # a full listing although no event came: the safety net
ROOT_POLL_S = 5.0  # neither the Ray log directory nor its parent exists yet
MAX_WATCHED_DIRS_PER_CONTAINER = 64  # a container dir and 21 sessions' session/logs/serve
FORGET_AFTER_S = 300.0
READ_CHUNK = 256 * 1024
READ_RATE_BYTES = 4 * 1024 * 1024  # per container and second (one second's worth may be saved up)
MAX_OPEN_PER_CONTAINER = 32  # files tailed at once per container
MAX_REFUSED_TRACKED = 10_000  # refused entries remembered (to report each once); beyond: counted as overflow
MAX_REFUSED_EVENTS_PER_CONTAINER = 20  # events per container; the counters go on counting
SESSION_PATH = ("logs", "serve")  # below each session_* directory
RAY_OWN_SYMLINK = "session_latest"  # Ray's own link to the current session: expected, not followed
_LOG_NAME = re.compile(r".+\.log(?:\.(\d+))?\Z")  # x.log, and x.log.N rotated away
_CONTAINER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}\Z")  # Docker's names, bounded
_RAY_TS = re.compile(rb"(?:[A-Z]+ +)?(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[,.](\d{1,9}))?")
log = logging.getLogger(__name__)


def parse_ray_ts_ns(line: bytes) -> int | None:
    match = _RAY_TS.match(line)
    if match is None:
        return None
    parts = [int(g) for g in match.groups()[:6]]
    try:
        seconds = calendar.timegm((*parts, 0, 0, 0))
    except (OverflowError, ValueError):
        return None
    return seconds * 1_000_000_000 + int((match[7] or b"").ljust(9, b"0"))


def _oldest_first(name: str) -> tuple[str, int]:
    """x.log.3 before x.log.2 before x.log.1 (RotatingFileHandler's numbering)."""
    base, _, suffix = name.rpartition(".log.")
    return (base, -int(suffix) if suffix.isdigit() else 0)


class ReadBudget:
    """Bytes each container may read now: `rate` per second, at most one second's worth saved."""

    def __init__(self, rate: int):
        self.rate = rate
        self.left: dict[str, tuple[float, float]] = {}  # container -> (bytes left, when)

    def take(self, key: str, want: int, peek: bool = False) -> int:
        """Up to `want` bytes granted now (with peek: how many could be, nothing taken)."""
        now = time.monotonic()
        left, at = self.left.get(key, (self.rate, now))
        left = min(self.rate, left + (now - at) * self.rate)
        if peek:
            return int(left)
        grant = int(min(want, left))
        self.left[key] = (left - grant, now)
        return grant

    def refund(self, key: str, unused: int) -> None:
        left, at = self.left[key]
        self.left[key] = (left + unused, at)


@dataclass
class Tail:
    parts: tuple[str, ...]  # container, session, "logs", "serve", file name (relative to the root)
    path: str
    fd: int
    ident: tuple[int, int]
    offset: int
    ts_ns: int
    labels: Labels
    metadata: dict[str, str]
    pending: bytes = field(default=b"")
    at_eof: bool = False
    wd: int | None = None  # its inotify watch

    @property
    def key(self) -> str:
        return f"file:{self.ident[0]}:{self.ident[1]}"

    @property
    def container(self) -> str:
        return self.parts[0]


def _open_dir(path: str | os.PathLike[str]) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None


class RayFileSource(Source):
    kind = "ray-serve"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tails: dict[tuple[int, int], Tail] = {}
        # Files read to their end (or skipped): ident -> (mtime then, last seen in a scan).
        self.finished: dict[tuple[int, int], tuple[int, float]] = {}
        self.rotations = 0
        self.truncations = 0
        self.budget = ReadBudget(READ_RATE_BYTES)
        self.refused: dict[str, int] = {}  # reason -> distinct entries refused
        self.refused_seen: set[tuple[str, str]] = set()  # (relative path, reason) reported already
        self.refused_events: dict[str, int] = {}  # container -> events sent
        self.watch: TreeWatch | None = None
        self.root_watched = False  # the Ray log directory (or its parent) is watched

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
                    root_fd = self.open_root()
                    if root_fd is not None:
                        try:
                            if not self.drain_detached(root_fd):
                                return
                            self.scan(root_fd, first)
                            first = False
                        finally:
                            os.close(root_fd)
                more = self.read_round()
                if more is None:
                    return
                list_again = more or self.wait(started)
        finally:
            self.close_all()

    def wait(self, round_started: float) -> bool:
        """Until there is work: whether the tree is to be listed again (False: only tailed
        files grew). At most one round per POLL_S."""
        assert self.watch is not None
        self.stop_event.wait(max(0.0, round_started + POLL_S - time.monotonic()))
        if self.stop_event.is_set() or self.watch.polling or any(not t.at_eof for t in self.tails.values()):
            return True  # polling, or a read budget left data unread: read on after POLL_S
        if not self.root_watched:
            self.stop_event.wait(ROOT_POLL_S)
            return True
        return self.watch.wait(RESCAN_S)

    def stop(self) -> None:
        if self.watch is not None:
            self.watch.wake()

    def open_root(self) -> int | None:
        """The agent's own directory (not container-controlled); None until it exists, and
        then its parent is watched for its creation."""
        assert self.watch is not None
        self.watch.begin_listing()
        self.root_watched = False
        fd = _open_dir(self.config.ray_log_dir)
        if fd is None:
            parent_fd = _open_dir(os.path.dirname(self.config.ray_log_dir) or ".")
            if parent_fd is None:
                return None
            try:
                self.watch.watch_dir(parent_fd, "")
            finally:
                os.close(parent_fd)
            # Made between the first try and the watch, it would send no event: try again.
            fd = _open_dir(self.config.ray_log_dir)
        if fd is not None:
            self.watch.watch_dir(fd, "")
        self.root_watched = True
        return fd

    # --- finding files

    def scan(self, root_fd: int, first: bool) -> None:
        """Open files not tailed yet, including files that rotated away more than once
        between two scans. Renames during a listing can hide a file from it, so the listing
        repeats until it finds nothing new: all of them are open before any is read."""
        present: set = set()
        for _ in range(10):
            known = len(self.tails) + len(self.finished)
            present = set()
            for parts, serve_fd, device in self.serve_dirs(root_fd):
                present |= self.open_serve_files(parts, serve_fd, device, first)
            if len(self.tails) + len(self.finished) == known:
                break
        now = time.monotonic()
        for ident in present & self.finished.keys():
            self.finished[ident] = (self.finished[ident][0], now)
        # Forget finished files only after a while unseen: a rename during the listing can
        # hide a file from one scan, and forgetting it then would read it twice.
        self.finished = {i: seen for i, seen in self.finished.items() if now - seen[1] < FORGET_AFTER_S}
        if first:
            keys = {f"file:{d}:{i}" for d, i in present}
            for key in self.positions.keys("file:"):
                if key not in keys:
                    self.positions.forget(key)  # the file is gone

    def serve_dirs(self, root_fd: int):
        """(parts, descriptor, device) of every <container>/session_*/logs/serve directory;
        each descriptor is closed when the caller asks for the next one."""
        for container in self.listing(root_fd, ()):
            if not container.is_dir(follow_symlinks=False) and not container.is_symlink():
                continue
            if not _CONTAINER_NAME.match(container.name):
                self.refuse((container.name,), "bad_name")
                continue
            try:
                container_fd, device = mount.open_dir(container.name, root_fd, None)
            except FileNotFoundError:
                continue
            except Refused as refused:
                self.refuse((container.name,), refused.reason)
                continue
            assert self.watch is not None
            self.watch.watch_dir(container_fd, container.name)
            try:
                for session in self.listing(container_fd, (container.name,)):
                    if not session.name.startswith("session_") or (
                        session.name == RAY_OWN_SYMLINK and session.is_symlink()
                    ):
                        continue
                    yield from self.descend((container.name, session.name), container_fd, device)
            finally:
                os.close(container_fd)

    def descend(self, parts: tuple[str, ...], parent_fd: int, device: int):
        """Open parts[-1] under parent_fd, then SESSION_PATH below it; yields the last one."""
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
                    self.refuse(here, refused.reason)
                    return
                fds.append(fd)
                assert self.watch is not None
                self.watch.watch_dir(fd, parts[0])
            yield (*parts, *SESSION_PATH), fd, device
        finally:
            for fd in fds:
                os.close(fd)

    def listing(self, dir_fd: int, parts: tuple[str, ...]) -> list[os.DirEntry]:
        found: list[os.DirEntry] = []
        try:
            for entry in mount.entries(dir_fd):
                found.append(entry)
        except Refused as refused:
            self.refuse(parts or ("",), refused.reason)
        except OSError as exc:
            log.warning("logs: cannot list %s (%s)", self.relpath(parts), exc)
        return sorted(found, key=lambda e: e.name)

    def open_serve_files(self, parts: tuple[str, ...], serve_fd: int, device: int, first: bool) -> set:
        live: list[str] = []
        rotated: list[str] = []
        for entry in self.listing(serve_fd, parts):
            match = _LOG_NAME.match(entry.name)
            if match:
                (rotated if match[1] else live).append(entry.name)
        present = set()
        # Rotated first (oldest first), then live: a predecessor is renamed by then.
        for name in [*sorted(rotated, key=_oldest_first), *live]:
            ident = self.open((*parts, name), serve_fd, device, first, rotated=name not in live)
            if ident is not None:
                present.add(ident)
        return present

    def open(
        self, parts: tuple[str, ...], serve_fd: int, device: int, first: bool, rotated: bool
    ) -> tuple[int, int] | None:
        container = parts[0]
        if sum(t.container == container for t in self.tails.values()) >= MAX_OPEN_PER_CONTAINER:
            known = mount.identity_at(serve_fd, (parts[-1],))
            if known not in self.tails and known not in self.finished:
                self.refuse(parts, "too_many_files")
            return known
        try:  # open, then fstat: the descriptor names the file even if a rename races us
            fd, st = mount.open_file(parts[-1], serve_fd, device)
        except FileNotFoundError:
            return None
        except Refused as refused:
            self.refuse(parts, refused.reason)
            return None
        ident = (st.st_dev, st.st_ino)
        if ident in self.tails or self.finished.get(ident, (None,))[0] == st.st_mtime_ns:
            os.close(fd)
            return ident
        key = f"file:{ident[0]}:{ident[1]}"
        path = self.relpath(parts)
        stored = self.positions.get(key) if first else None
        if first and rotated and not isinstance(stored, dict):
            os.close(fd)
            self.finished[ident] = (st.st_mtime_ns, time.monotonic())  # rotated before we started
            return ident
        if isinstance(stored, dict):
            offset, ts_ns = int(stored.get("offset", 0)), int(stored.get("ts", st.st_mtime_ns))
        else:  # a new file (or, after start, one that rotated away before a scan saw it)
            old = first and st.st_mtime < time.time() - FIRST_START_WINDOW_S
            offset, ts_ns = (st.st_size if old else 0), st.st_mtime_ns
            self.positions.initialize(key, {"offset": offset, "ts": ts_ns, "path": path}, replace=True)
        filename = parts[-1]
        self.tails[ident] = Tail(
            parts=parts,
            path=path,
            fd=fd,
            ident=ident,
            offset=offset,
            ts_ns=ts_ns,
            labels=self.labels.ray_file(container, filename),
            metadata={"filename": safe_name(filename.split(".log")[0] + ".log"), "session": safe_name(parts[1])},
            wd=self.watch.watch_file(fd) if self.watch is not None else None,
        )
        return ident

    def relpath(self, parts: tuple[str, ...]) -> str:
        return os.path.join(self.config.ray_log_dir, *parts)

    def refuse(self, parts: tuple[str, ...], reason: str) -> None:
        """Count and report a hostile (or broken) entry once; it is never followed."""
        key = ("/".join(parts), reason)
        if key in self.refused_seen:
            return
        if len(self.refused_seen) >= MAX_REFUSED_TRACKED:
            self.refused["overflow"] = 1  # stop remembering: memory stays bounded
            return
        self.refused_seen.add(key)
        self.refused[reason] = self.refused.get(reason, 0) + 1
        container = safe_name(parts[0])
        shown = repr("/".join(parts))[:200]
        log.warning("logs: refused %s under the Ray log directory (%s): not followed, not read", shown, reason)
        sent = self.refused_events.get(container, 0)
        if sent < MAX_REFUSED_EVENTS_PER_CONTAINER:
            self.refused_events[container] = sent + 1
            digest = hashlib.sha256(f"{key[0]}\0{reason}".encode("utf-8", "surrogateescape")).hexdigest()[:16]
            report_event(
                self.config,
                {
                    "type": "logs.entry_refused",
                    "container": container,
                    "path": shown,
                    "reason": reason,
                    "message": f"a log file entry of container {container} was refused ({reason}): {shown}",
                },
                record_id=f"logs-refused:{digest}",
            )

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
            if not self.read(tail):
                return False
            if not tail.at_eof:
                continue  # its read budget ran out: finished on a later round
            if tail.pending and not self.ship(tail, tail.pending, len(tail.pending)):
                return False
            self.rotations += 1
            self.finished[ident] = (os.fstat(tail.fd).st_mtime_ns, time.monotonic())
            assert self.watch is not None
            self.watch.unwatch_file(tail.wd)
            os.close(tail.fd)
            del self.tails[ident]
        return True

    def read_round(self) -> bool | None:
        """Read the files for at most POLL_S, one chunk per file in turn, so one huge file
        does not hold up the others; files of one rotation group (x.log.2, x.log.1, x.log)
        strictly oldest first; each container within its read budget. Returns whether data
        is left to read now (the round ended on time), None when the backlog closed."""
        groups: dict[tuple[str, ...], list[Tail]] = {}
        for tail in self.oldest_first():
            groups.setdefault((*tail.parts[:-1], tail.parts[-1].split(".log")[0]), []).append(tail)
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
                if not tails or not tail.at_eof and not self.budget.take(tail.container, 0, peek=True):
                    del groups[key]  # done, or its container's budget is spent until the next poll
        return False

    def read(self, tail: Tail, max_chunks: int | None = None) -> bool:
        """Read what the budget allows (at most max_chunks chunks); False when the backlog closed."""
        size = os.fstat(tail.fd).st_size
        if size < tail.offset:
            log.info("logs: %s was truncated; reading it again from the start", tail.path)
            self.truncations += 1
            tail.offset, tail.pending = 0, b""
        tail.at_eof = False
        chunks = 0
        while max_chunks is None or chunks < max_chunks:
            chunks += 1
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

    def ship(self, tail: Tail, line: bytes, consumed: int) -> bool:
        ts_ns = parse_ray_ts_ns(line) or tail.ts_ns
        offset = tail.offset + consumed
        entry = Entry(
            tail.labels,
            ts_ns,
            clean_line(line),
            tail.metadata,
            tail.key,
            {"offset": offset, "ts": ts_ns, "path": tail.path},
        )
        if not self.backlog.put(entry):
            return False
        tail.offset, tail.ts_ns = offset, ts_ns
        if consumed == len(line):  # shipped the pending rest: it is no longer pending
            tail.pending = b""
        self.lines_read += 1
        return True

    def close_all(self) -> None:
        for tail in self.tails.values():
            os.close(tail.fd)
        self.tails.clear()

    def status(self) -> dict[str, object]:
        return {
            **super().status(),
            "files": len(self.tails),
            "watching": self.watch.status() if self.watch is not None else None,
            "rotations": self.rotations,
            "truncations": self.truncations,
            "refused": dict(self.refused),
            "refused_total": sum(n for reason, n in self.refused.items() if reason != "overflow"),
        }
