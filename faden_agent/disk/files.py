"""One way to replace a small file atomically: a temp file in the same directory, written
(and fsynced), given its mode, then renamed over the old one, so a reader or a crash sees
either the old content or the new, never half of it. A file found corrupt is moved aside
with a timestamped name (quarantine) and reported, never silently overwritten."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger(__name__)


def replace_file(path: Path, data: bytes, mode: int = 0o600, fsync: bool = True) -> None:
    path = Path(path)
    # A private file gets a private directory when we create one; others a readable one.
    path.parent.mkdir(mode=0o700 if not mode & 0o077 else 0o755, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)  # created 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def replace_file_if_changed(path: Path, data: bytes, mode: int = 0o600) -> bool:
    """replace_file unless the file already holds exactly this, with this mode; True if written."""
    try:
        if path.read_bytes() == data and path.stat().st_mode & 0o777 == mode:
            return False
    except FileNotFoundError:
        pass
    replace_file(path, data, mode)
    return True


def quarantine(path: Path, side_suffixes: tuple[str, ...] = ()) -> Path:
    """Move a corrupt file aside as NAME.corrupt-<UTC time> (its side files, e.g. SQLite's
    -wal/-shm, go with it), so a fresh one can take its place and the old one stays for a
    post-mortem. Returns where it went."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    os.replace(path, target)
    for suffix in side_suffixes:
        side = path.with_name(path.name + suffix)
        if side.exists():
            os.replace(side, target.with_name(target.name + suffix))
    return target


def quarantine_event(what: str, path: Path, moved_to: Path, error: str) -> dict[str, Any]:
    """The event that tells the backend (record id: quarantine_record_id)."""
    error = error[:200]
    return {
        "type": "agent.file_quarantined",
        "file": what,
        "path": str(path),
        "moved_to": str(moved_to),
        "error": error,
        "message": f"the {what} {path} was corrupt ({error}); moved aside to {moved_to.name}, started afresh",
    }


def quarantine_record_id(event: dict[str, Any]) -> str:
    return f"ev:quarantine:{Path(event['moved_to']).name}"


def load_kept(
    path: Path, max_bytes: int, problem: Callable[[Any], str | None], what: str, read_only: bool = False
) -> tuple[Any, dict[str, Any] | None]:
    """A JSON file the agent keeps in its state directory: (its data, None) when `problem`
    finds nothing wrong with it; (None, the quarantine event) when it was corrupt and is moved
    aside (left in place, no event, when `read_only`); (None, None) when absent or unreadable."""
    try:
        with open(path, "rb") as fh:  # our own 0700 state directory
            raw = fh.read(max_bytes + 1)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        log.error("%s %s unreadable (%s); starting without it", what, path, exc)
        return None, None
    error, data = None, None
    try:
        data = orjson.loads(raw) if len(raw) <= max_bytes else None
        error = problem(data) if data is not None else f"over {max_bytes} bytes"
    except orjson.JSONDecodeError as exc:
        error = str(exc)
    if error is None:
        return data, None
    if read_only:
        return None, None
    event = quarantine_event(what, path, quarantine(path), error)
    log.error("%s", event["message"])
    return None, event
