"""One way to replace a small file atomically: a temp file in the same directory, written
(and fsynced), given its mode, then renamed over the old one, so a reader or a crash sees
either the old content or the new, never half of it. A file found corrupt is moved aside
with a timestamped name (quarantine) and reported, never silently overwritten."""

from __future__ import annotations

import logging
import os
import stat
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


class Unusable(Exception):
    """A kept file is not one this agent wrote: its message names the culprit."""


def read_kept(path: Path, max_bytes: int, problem: Callable[[Any], str | None]) -> Any:
    """A JSON file the agent keeps in its state directory, checked by `problem`: None without a
    file; Unusable (naming why) for a link, a FIFO, a file over `max_bytes`, not JSON or wrong."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Unusable(f"cannot open it: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Unusable("not a regular file")
        raw = os.read(fd, max_bytes + 1)
    except OSError as exc:
        raise Unusable(f"cannot read it: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(raw) > max_bytes:
        raise Unusable(f"over {max_bytes} bytes")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise Unusable(f"not JSON: {str(exc)[:120]}") from None
    found = problem(data)
    if found is not None:
        raise Unusable(found)
    return data


def load_kept(
    path: Path, max_bytes: int, problem: Callable[[Any], str | None], what: str, read_only: bool = False
) -> tuple[Any, dict[str, Any] | None]:
    """read_kept for the file's owner: (its data or None, None); an unusable file is moved aside
    and (None, the quarantine event) returned (left in place, no event, when `read_only`)."""
    try:
        return read_kept(path, max_bytes, problem), None
    except Unusable as exc:
        if read_only:
            return None, None
        try:
            moved = quarantine(path)
        except OSError as failure:
            log.error("%s %s unusable (%s) and not moved aside: %s", what, path, exc, failure)
            return None, None
        event = quarantine_event(what, path, moved, str(exc))
        log.error("%s", event["message"])
        return None, event


class PrivateDirError(OSError):
    """A directory the agent keeps its own files in cannot be trusted; str() is the one line."""


def ensure_private_dir(path: Path, what: str) -> Path:
    """Create the directory 0700, or take an existing one only when it is a directory (not a
    link), owned by this user and writable by nobody else (else someone may have put links in
    it that make us create or chmod their targets); one others may only enter is made 0700."""
    path = Path(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise PrivateDirError(f"{what} {path} is not a directory")
    if info.st_uid != os.geteuid():
        raise PrivateDirError(f"{what} {path} is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()})")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o022:
        raise PrivateDirError(
            f"{what} {path} is writable by others (mode {mode:04o}): they may have put links in it;"
            f" check what it holds, then chmod 700 {path}"
        )
    if mode != 0o700:
        os.chmod(path, 0o700)
    return path
