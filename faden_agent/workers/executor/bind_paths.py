"""Bind sources nobody but root can swap (docs/commands.md, Host policy): a source is walked
component by component, and every directory the walk looks a name up in must be owned by
root and writable by root alone, and outside every directory a container binds writable;
a writable bind holds no other bind's source. A breach is PathRefused naming its rule."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from typing import NamedTuple

MAX_LINKS = 40  # symlinks followed in one walk (the kernel's own bound)
SHM = "/dev/shm"  # what ipc_mode host gives a container: the host's, writable


class PathRefused(ValueError):
    """str() is the refusal without its `rule` prefix; `rule` names the rule."""

    def __init__(self, rule: str, message: str):
        super().__init__(message)
        self.rule = rule


class Bind(NamedTuple):
    """A host path a container mounts (its source resolved) and whether it may write there."""

    container: str
    source: str
    writable: bool


def walk(source: str, allowed: Sequence[str], writable: Sequence[Bind] | None, where: str) -> str:
    """The real path of `source`; PathRefused where a component could be swapped, or where a
    symlink sits at or below an allowed directory (a tenant may write there). `writable`:
    the binds containers can write (None: not known yet, that rule waits for the engine)."""
    if not source.startswith("/"):
        raise PathRefused("allow_bind", f"{where} is not an absolute path")
    pending = _components(source)
    current, info = "/", _lstat("/", where)
    links = 0
    while pending:
        name = pending.pop()
        if name == "..":
            current = os.path.dirname(current)
            info = _lstat(current, where)
            continue
        candidate = os.path.join(current, name)
        _shared(current, writable, where)
        entry = _lstat(candidate, where)
        _root_only(current, info, entry, where)
        if not stat.S_ISLNK(entry.st_mode):
            current, info = candidate, entry
            continue
        if any(within(candidate, a) for a in allowed):
            raise PathRefused(
                "allow_bind", f"{where}: {candidate} is a symlink inside an allowed directory; name the real path"
            )
        links += 1
        if links > MAX_LINKS:
            raise PathRefused("allow_bind", f"{where}: more than {MAX_LINKS} symlinks")
        target = _readlink(candidate, where)
        pending.extend(_components(target))
        if target.startswith("/"):
            current, info = "/", _lstat("/", where)
    return current


def check_holds(binds: Sequence[tuple[str, Bind]], others: Sequence[Bind]) -> None:
    """PathRefused when one of `binds` (where, bind), writable, holds another bind's source:
    a tenant of it could swap that source before its container (re)starts."""
    for where, bind in binds:
        if not bind.writable:
            continue
        for other in [*others, *(b for _, b in binds)]:
            if other.source != bind.source and within(other.source, bind.source):
                raise PathRefused(
                    "shared_bind",
                    f"{where} (resolved {bind.source}) is bound writable and holds {other.source}, which "
                    f"container {other.container} binds: a tenant here could swap it; bind the shared "
                    "directory itself in both",
                )


def within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _shared(directory: str, writable: Sequence[Bind] | None, where: str) -> None:
    for bind in writable or ():
        if within(directory, bind.source):
            raise PathRefused(
                "shared_bind",
                f"{where} is inside {bind.source}, which container {bind.container} binds writable: a tenant "
                "there can swap it before the engine mounts it; bind the shared directory itself",
            )


def _root_only(directory: str, info: os.stat_result, entry: os.stat_result, where: str) -> None:
    """`directory` lets no one but root replace its entry (a sticky one: an entry root owns)."""
    mode = stat.S_IMODE(info.st_mode)
    sticky_guard = mode & stat.S_ISVTX and entry.st_uid == 0
    if info.st_uid != 0 or (mode & 0o022 and not sticky_guard):
        raise PathRefused(
            "root_owned",
            f"{where}: {directory} (owner uid {info.st_uid}, mode {mode:04o}) can be written by others than "
            "root, who could swap the source before the engine mounts it",
        )


def _components(path: str) -> list[str]:
    """The names of `path`, last first (a stack)."""
    return [name for name in reversed(path.split("/")) if name not in ("", ".")]


def _lstat(path: str, where: str) -> os.stat_result:
    try:
        return os.lstat(path)
    except OSError as exc:
        raise PathRefused("allow_bind", f"{where}: {path} cannot be read: {exc.strerror or exc}") from None


def _readlink(path: str, where: str) -> str:
    try:
        return os.readlink(path)
    except OSError as exc:
        raise PathRefused("allow_bind", f"{where}: {path} cannot be read: {exc.strerror or exc}") from None
