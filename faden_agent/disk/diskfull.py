"""A full disk is a state to report and recover from, not a crash (docs/service.md).

Every write of the agent's files goes through retry_when_full: a thread waits and retries,
a worker's main loop gets DiskFull at once; the process's DISK state names the path until a
write succeeds again. Nothing is lost or sent twice.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from faden_agent.common.errorline import error_line

log = logging.getLogger(__name__)

RETRY_S = 1.0
T = TypeVar("T")
FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
LOW_SPACE_BYTES = 1 << 20  # less than this free: an I/O error of SQLite is the full disk


class DiskFull(OSError):
    """A write failed because the file system is full; str() names the path."""

    def __init__(self, path: Path | str, detail: str):
        super().__init__(errno.ENOSPC, f"disk full: cannot write {path} ({detail})")
        self.path = str(path)


def is_disk_full(exc: BaseException, path: Path | str | None = None) -> bool:
    if isinstance(exc, DiskFull):
        return True
    if isinstance(exc, OSError):
        return exc.errno in FULL_ERRNOS
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if code == sqlite3.SQLITE_FULL or "database or disk is full" in str(exc):
            return True
        # Creating or growing the WAL's side files on a full disk says "disk I/O error"
        # (SQLITE_IOERR); it is the full disk when the file system has no room left.
        return path is not None and (code or 0) & 0xFF == sqlite3.SQLITE_IOERR and no_room(path)
    return False


def no_room(path: Path | str) -> bool:
    try:
        stats = os.statvfs(Path(path).parent)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < LOW_SPACE_BYTES


class DiskState:
    """This process's view: which path could not be written, since when (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._full: dict[str, dict[str, Any]] = {}

    def full(self, path: Path | str, error: str) -> bool:
        """Note a failed write; True when this path was not known full yet (log it once)."""
        with self._lock:
            new = str(path) not in self._full
            if new:
                self._full[str(path)] = {"path": str(path), "error": error[:200], "since": time.time()}
            return new

    def written(self, path: Path | str) -> bool:
        """Note a successful write; True when this path was full until now."""
        with self._lock:
            return self._full.pop(str(path), None) is not None

    def snapshot(self) -> dict[str, Any] | None:
        """{"path", "error", "since", "paths"} of the oldest full path, or None."""
        with self._lock:
            if not self._full:
                return None
            first = min(self._full.values(), key=lambda entry: entry["since"])
            return {**first, "paths": sorted(self._full)}


DISK = DiskState()


def retry_when_full(write: Callable[[], T], path: Path | str, stop: threading.Event | None = None) -> T:
    """Run `write`; while the disk is full, retry it (off the main thread) or raise DiskFull
    (on it, or when `stop` is set). Other errors pass through unchanged."""
    while True:
        try:
            result = write()
        except BaseException as exc:  # only a full disk is handled here
            if not is_disk_full(exc, path):
                raise
            detail = error_line(exc)
            if DISK.full(path, detail):
                log.error(
                    "disk full: cannot write %s (%s); retrying every %gs until there is space", path, detail, RETRY_S
                )
            if threading.current_thread() is threading.main_thread() or (stop is not None and stop.is_set()):
                raise DiskFull(path, detail) from None
            if stop is not None:
                stop.wait(RETRY_S)
            else:
                time.sleep(RETRY_S)
            continue
        if DISK.written(path):
            log.warning("%s is written again: the disk has space", path)
        return result


def writes_file(method: Callable[..., T]) -> Callable[..., T]:
    """A method of an object writing the file at `self.path`: each call is a write that
    waits out a full disk (retry_when_full), so every file's writers share one mechanism."""

    @functools.wraps(method)
    def write(self: Any, *args: Any, **kwargs: Any) -> T:
        return retry_when_full(lambda: method(self, *args, **kwargs), self.path)

    return write
