"""Ray Serve log files: <RAY_LOG_DIR>/<container name>/session_*/logs/serve/*.log on the host
(the executor mounts <RAY_LOG_DIR>/<container name> at protocol.RAY_LOG_MOUNT in managed
Ray containers).

Each file is tailed through an open descriptor, its position keyed by device+inode with the
byte offset after the last accepted line. Rotation by rename (Python's RotatingFileHandler,
which Ray uses): the path then names a new inode; the old descriptor is read to its end
first, then the new file from its start, so no line is lost and the order holds.
Truncation (copytruncate): a size below the offset restarts the file at 0.

Timestamps: Ray's line prefix "LEVEL YYYY-MM-DD HH:MM:SS,mmm" (read as UTC); a line without
one (a traceback line) gets the previous line's; a file's first lines without one get the
file's modification time when it was found, stored at once, so a replay is exact.
"""

from __future__ import annotations

import calendar
import glob
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from faden_agent.workers.logs.entry import MAX_LINE_BYTES, Entry, Labels, clean_line
from faden_agent.workers.logs.sources import FIRST_START_WINDOW_SEC, Source

POLL_SEC = 0.5
FORGET_AFTER_SEC = 300.0
READ_CHUNK = 256 * 1024
LIVE = "*/session_*/logs/serve/*.log"
ROTATED = "*/session_*/logs/serve/*.log.*"  # resumed after a restart when a position names them
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


def _oldest_first(path: str) -> tuple[str, int]:
    """x.log.3 before x.log.2 before x.log.1 (RotatingFileHandler's numbering)."""
    base, _, suffix = path.rpartition(".log.")
    return (base, -int(suffix) if suffix.isdigit() else 0)


@dataclass
class Tail:
    path: str
    fd: int
    ident: tuple[int, int]
    offset: int
    ts_ns: int
    labels: Labels
    metadata: dict[str, str]
    pending: bytes = field(default=b"")

    @property
    def key(self) -> str:
        return f"file:{self.ident[0]}:{self.ident[1]}"


class RayFileSource(Source):
    kind = "ray-serve"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tails: dict[tuple[int, int], Tail] = {}
        # Files read to their end (or skipped): ident -> (mtime then, last seen in a scan).
        self.finished: dict[tuple[int, int], tuple[int, float]] = {}
        self.rotations = 0
        self.truncations = 0

    def follow(self) -> None:
        self.close_all()
        root = Path(self.config.ray_log_dir)
        self.scan(root, first=True)
        try:
            while not self.stop_event.is_set():
                if not self.drain_detached():
                    return
                self.scan(root, first=False)
                for tail in self.oldest_first():
                    if not self.read(tail):
                        return
                self.stop_event.wait(POLL_SEC)
        finally:
            self.close_all()

    def scan(self, root: Path, first: bool) -> None:
        """Open files not tailed yet, including files that rotated away more than once
        between two scans. Renames during a listing can hide a file from it, so the listing
        repeats until it finds nothing new: all of them are open before any is read."""
        present: set = set()
        for _ in range(10):
            known = len(self.tails) + len(self.finished)
            live = sorted(glob.glob(str(root / LIVE)))  # live first: a predecessor is renamed by then
            rotated = sorted(glob.glob(str(root / ROTATED)), key=_oldest_first)
            present = {self.open(path, first, rotated=True) for path in rotated}
            present |= {self.open(path, first, rotated=False) for path in live}
            if len(self.tails) + len(self.finished) == known:
                break
        now = time.monotonic()
        for ident in present & self.finished.keys():
            self.finished[ident] = (self.finished[ident][0], now)
        # Forget finished files only after a while unseen: a rename during the listing can
        # hide a file from one scan, and forgetting it then would read it twice.
        self.finished = {i: seen for i, seen in self.finished.items() if now - seen[1] < FORGET_AFTER_SEC}
        if first:
            keys = {f"file:{d}:{i}" for d, i in present if d is not None}
            for key in self.positions.keys("file:"):
                if key not in keys:
                    self.positions.forget(key)  # the file is gone

    def open(self, path: str, first: bool, rotated: bool) -> tuple[int, int] | tuple[None, None]:
        try:  # open, then fstat: the descriptor names the file even if a rename races us
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return (None, None)
        st = os.fstat(fd)
        ident = (st.st_dev, st.st_ino)
        if ident in self.tails or self.finished.get(ident, (None,))[0] == st.st_mtime_ns:
            os.close(fd)
            return ident
        key = f"file:{ident[0]}:{ident[1]}"
        stored = self.positions.get(key) if first else None
        if first and rotated and not isinstance(stored, dict):
            os.close(fd)
            self.finished[ident] = (st.st_mtime_ns, time.monotonic())  # rotated before we started
            return ident
        if isinstance(stored, dict):
            offset, ts_ns = int(stored.get("offset", 0)), int(stored.get("ts", st.st_mtime_ns))
        else:  # a new file (or, after start, one that rotated away before a scan saw it)
            old = first and st.st_mtime < time.time() - FIRST_START_WINDOW_SEC
            offset, ts_ns = (st.st_size if old else 0), st.st_mtime_ns
            self.positions.initialize(key, {"offset": offset, "ts": ts_ns, "path": path}, replace=True)
        parts = Path(path).relative_to(self.config.ray_log_dir).parts  # container/session/logs/serve/file
        filename = Path(path).name
        self.tails[ident] = Tail(
            path=path, fd=fd, ident=ident, offset=offset, ts_ns=ts_ns,
            labels=self.labels.ray_file(parts[0], filename),
            metadata={"filename": filename.split(".log")[0] + ".log", "session": parts[1]},
        )
        return ident

    def oldest_first(self) -> list[Tail]:
        """Tails by last write: a rotated file's lines go out before its successor's."""
        return sorted(self.tails.values(), key=lambda tail: os.fstat(tail.fd).st_mtime_ns)

    def drain_detached(self) -> bool:
        """Read rotated-away (renamed or deleted) files to their end, then close them."""
        for tail in self.oldest_first():
            ident = tail.ident
            try:
                st = os.stat(tail.path)
                current = (st.st_dev, st.st_ino)
            except FileNotFoundError:
                current = None
            if current == ident:
                continue
            if not self.read(tail) or (tail.pending and not self.ship(tail, tail.pending, len(tail.pending))):
                return False
            self.rotations += 1
            self.finished[ident] = (os.fstat(tail.fd).st_mtime_ns, time.monotonic())
            os.close(tail.fd)
            del self.tails[ident]
        return True

    def read(self, tail: Tail) -> bool:
        size = os.fstat(tail.fd).st_size
        if size < tail.offset:
            log.info("logs: %s was truncated; reading it again from the start", tail.path)
            self.truncations += 1
            tail.offset, tail.pending = 0, b""
        while True:
            data = os.pread(tail.fd, READ_CHUNK, tail.offset + len(tail.pending))
            if not data:
                return True
            *lines, tail.pending = (tail.pending + data).split(b"\n")
            for line in lines:
                if not self.ship(tail, line, len(line) + 1):
                    return False
            if len(tail.pending) > MAX_LINE_BYTES:  # a line without end: ship what we have
                if not self.ship(tail, tail.pending, len(tail.pending)):
                    return False
                tail.pending = b""

    def ship(self, tail: Tail, line: bytes, consumed: int) -> bool:
        ts_ns = parse_ray_ts_ns(line) or tail.ts_ns
        offset = tail.offset + consumed
        entry = Entry(tail.labels, ts_ns, clean_line(line), tail.metadata, tail.key,
                      {"offset": offset, "ts": ts_ns, "path": tail.path})
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
        return {**super().status(), "files": len(self.tails), "rotations": self.rotations,
                "truncations": self.truncations}
