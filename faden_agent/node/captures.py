"""Captures on their way to Loki: <state>/captures/<id>.json holds one capture's JSON line,
written whole by the inventory (a temporary name, then a rename), shipped and removed by the
log worker once Loki took it. Bounded: MAX_WAITING files of at most MAX_FILE_BYTES; `taken`
keeps the last MAX_TAKEN ids, so one stall or death is captured once across restarts."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

from faden_agent.disk.files import replace_file
from faden_agent.protocol import MAX_LOG_LINE_BYTES

DIRECTORY = "captures"
SUFFIX = ".json"
TAKEN = "taken"
MAX_WAITING = 16
MAX_FILE_BYTES = MAX_LOG_LINE_BYTES  # one Loki line
MAX_TAKEN = 256
ID = re.compile(r"cap-[0-9a-f]{16}\Z")


class NotKept(Exception):
    """The capture could not be put down for the log worker (the reason says why)."""


def capture_id(key: str) -> str:
    """The id of the capture of one event (its record id): the same event, the same id."""
    return "cap-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def directory(state_dir: Path) -> Path:
    return Path(state_dir) / DIRECTORY


def waiting(state_dir: Path) -> list[str]:
    """The ids of the captures waiting to be shipped, oldest first."""
    try:
        with os.scandir(directory(state_dir)) as entries:
            found = [
                (entry.stat(follow_symlinks=False).st_mtime_ns, entry.name[: -len(SUFFIX)])
                for entry in entries
                if entry.name.endswith(SUFFIX) and ID.match(entry.name[: -len(SUFFIX)])
            ]
    except OSError:
        return []
    return [capture for _, capture in sorted(found)]


def keep(state_dir: Path, capture: str, line: bytes) -> None:
    """Put one capture down for the log worker, or NotKept."""
    if not ID.match(capture) or len(line) > MAX_FILE_BYTES:
        raise NotKept(f"not a capture: {capture[:40]!r} of {len(line)} bytes")
    if len(waiting(state_dir)) >= MAX_WAITING:
        raise NotKept(f"{MAX_WAITING} captures already wait for Loki")
    try:
        replace_file(directory(state_dir) / (capture + SUFFIX), line)
    except OSError as exc:
        raise NotKept(f"cannot write it: {exc.strerror or exc}") from None


def read(state_dir: Path, capture: str) -> bytes:
    """A waiting capture's line; OSError or ValueError for anything but a small regular file."""
    if not ID.match(capture):
        raise ValueError(f"not a capture id: {capture[:40]!r}")
    fd = os.open(directory(state_dir) / (capture + SUFFIX), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"capture {capture} is not a regular file")
        data = fh.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"capture {capture} is over {MAX_FILE_BYTES} bytes")
    return data


def remove(state_dir: Path, capture: str) -> None:
    if ID.match(capture):
        try:
            os.unlink(directory(state_dir) / (capture + SUFFIX))
        except FileNotFoundError:
            pass


def taken(state_dir: Path) -> list[str]:
    """The ids captured lately (by this machine's inventory, this run or an earlier one)."""
    try:
        with open(directory(state_dir) / TAKEN, "rb") as fh:
            text = fh.read(MAX_TAKEN * 2 * 24).decode("ascii", "replace")
    except OSError:
        return []
    return [line for line in text.split() if ID.match(line)][-MAX_TAKEN:]


def note_taken(state_dir: Path, capture: str) -> None:
    ids = [*(i for i in taken(state_dir) if i != capture), capture][-MAX_TAKEN:]
    replace_file(directory(state_dir) / TAKEN, ("\n".join(ids) + "\n").encode())
