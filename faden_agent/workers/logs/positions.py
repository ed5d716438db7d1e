"""Durable source positions: where each source resumes after a restart.

A position moves only once Loki accepted the batch holding it, so a crash re-reads (exact
duplicates Loki drops) and never loses a line; a full disk keeps them in memory until a
later save succeeds.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from faden_agent.disk.diskfull import DISK, is_disk_full
from faden_agent.disk.files import quarantine, quarantine_event, replace_file

POSITIONS_FILE = "logs-positions.json"
FSYNC_INTERVAL_S = 2.0
DISK_FULL_RETRY_S = 1.0
log = logging.getLogger(__name__)


class Positions:
    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / POSITIONS_FILE
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()  # snapshots reach the disk in the order taken
        self.quarantined: dict[str, Any] | None = None  # the event when a corrupt file was moved aside
        self.loaded_mtime_ns: int | None = None  # when the loaded file was last saved; None: no file
        self._values: dict[str, Any] = self._load()
        self._dirty = False
        self._synced_at = 0.0
        self._failed_at: float | None = None  # the last save that found the disk full
        self._fd: int | None = None  # the file as last replaced, for the cheap saves
        self._length = 0

    def _load(self) -> dict[str, Any]:
        try:
            self.loaded_mtime_ns = self.path.stat().st_mtime_ns
            data = orjson.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except OSError as exc:
            # Starting over from the first-start window beats refusing to ship at all.
            log.error("log positions %s unreadable (%s); starting from the first-start window", self.path, exc)
            return {}
        except orjson.JSONDecodeError as exc:
            data = exc
        if isinstance(data, dict):
            return data
        # Corrupt: keep it for a post-mortem, start from the first-start window, report it.
        error = str(data) if isinstance(data, Exception) else f"not a JSON object: {type(data).__name__}"
        self.quarantined = quarantine_event("log positions", self.path, quarantine(self.path), error)
        log.error("%s", self.quarantined["message"])
        return {}

    def get(self, key: str, default: Any = None) -> Any:
        with self._lock:
            return self._values.get(key, default)

    def keys(self, prefix: str) -> list[str]:
        with self._lock:
            return [k for k in self._values if k.startswith(prefix)]

    def advance(self, updates: dict[str, Any]) -> None:
        """Record accepted positions (the shipper), or a source's note beside them (a
        file's end); saved with the next save."""
        if updates:
            with self._lock:
                self._values.update(updates)
                self._dirty = True

    def initialize(self, key: str, value: Any, replace: bool = False) -> None:
        """The start position of a newly found source, saved at once (e.g. a file's time
        base); an existing position is kept unless `replace` (a new file on a reused inode)."""
        with self._lock:
            if replace or key not in self._values:
                self._values[key] = value
                self._dirty = True
        self.save(force=True)

    def forget(self, key: str) -> None:
        with self._lock:
            if self._values.pop(key, None) is not None:
                self._dirty = True

    def save(self, force: bool = False) -> None:
        """Write what changed; fsync too when `force` or FSYNC_INTERVAL_S has passed."""
        with self._save_lock:
            self._save(force)

    def _save(self, force: bool) -> None:
        with self._lock:
            now = time.monotonic()
            if not self._dirty or (
                not force and self._failed_at is not None and now - self._failed_at < DISK_FULL_RETRY_S
            ):
                return
            data = orjson.dumps(self._values)
            self._dirty = False
            fsync = force or now - self._synced_at >= FSYNC_INTERVAL_S
        try:
            self._write(data, fsync)
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            with self._lock:
                self._dirty = True  # saved by a later call, when there is space
                self._failed_at = time.monotonic()
            if DISK.full(self.path, str(exc)):
                log.error(
                    "disk full: cannot save the log positions %s; shipping goes on, saved when there is space",
                    self.path,
                )
            return
        with self._lock:
            self._failed_at = None
            if fsync:
                self._synced_at = now
        if DISK.written(self.path):
            log.warning("log positions %s saved again: the disk has space", self.path)

    def _write(self, data: bytes, durable: bool) -> None:
        if durable or self._fd is None:
            replace_file(self.path, data, fsync=True)
            self.close()
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CLOEXEC)
            self._length = len(data)
            return
        padded = data.ljust(self._length)
        os.pwrite(self._fd, padded, 0)
        self._length = len(padded)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
