"""The standalone binary's unpacked builds (packaging/launcher.sh unpacks, this keeps order)."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import sys
import time
from pathlib import Path

LAUNCHER_ENV = "FADEN_AGENT_EXECUTABLE"
UNPACKING = ".unpack."  # <cache>/.unpack.<launcher pid>.<random>: a build being unpacked
# <payload hash>-<version> (packaging/build.sh): nothing else in the cache is ever removed,
# even when FADEN_AGENT_UNPACK_DIR names a directory that holds other things too.
BUILD_NAME = re.compile(r"[0-9a-f]{16}-[0-9A-Za-z.+-]+")
PLACED_GRACE_S = 60.0  # a build renamed into place this recently may be starting: not removed


def launcher_path() -> str | None:
    """The file the agent was started from (the launcher), when it was started that way."""
    path = os.environ.get(LAUNCHER_ENV, "")
    return path if os.path.isabs(path) and getattr(sys, "frozen", False) else None


def hold_and_prune(build_dir: Path, now: float | None = None) -> int | None:
    """Takes the shared lock on this build and removes what no process uses; returns the lock's fd.

    None when the directory has gone (a newer build's first start removed it while this
    one started): the caller starts over from the launcher, which unpacks it again.
    """
    try:
        fd = os.open(build_dir, os.O_RDONLY | os.O_DIRECTORY)  # not inherited by exec'd programs
    except FileNotFoundError:
        return None
    fcntl.flock(fd, fcntl.LOCK_SH)
    if not _same_file(fd, build_dir):  # renamed away while we waited for the lock
        os.close(fd)
        return None
    for entry in build_dir.parent.iterdir():
        if entry.name.startswith(UNPACKING):
            _remove_if_abandoned(entry)
        elif (
            entry.name != build_dir.name
            and BUILD_NAME.fullmatch(entry.name)
            and entry.is_dir()
            and not entry.is_symlink()
            and (entry / "faden-agent").is_file()
        ):
            _remove_if_unused(entry, time.time() if now is None else now)
    return fd


def _same_file(fd: int, path: Path) -> bool:
    try:
        here, there = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _remove_if_unused(build: Path, now: float) -> None:
    """An older build goes once no process holds its lock (exclusive lock, then rename, then
    delete) and it was not placed within PLACED_GRACE_S (its ctime: the launcher's rename)."""
    try:
        fd = os.open(build, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    if now - os.fstat(fd).st_ctime < _placed_grace_s():
        os.close(fd)
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # in use
        os.close(fd)
        return
    trash = build.with_name(f"{UNPACKING}{os.getpid()}.old-{build.name}")
    try:
        os.rename(build, trash)  # a start of that build now finds it missing and unpacks anew
    except OSError:
        return
    finally:
        os.close(fd)
    shutil.rmtree(trash, ignore_errors=True)


def _placed_grace_s() -> float:
    """PLACED_GRACE_S, or the test hook's (a test cannot age a directory's ctime)."""
    from faden_agent.common import testhooks

    value = testhooks.hook("placed_grace_s")
    return float(value) if value else PLACED_GRACE_S


def _remove_if_abandoned(entry: Path) -> None:
    """.unpack.<pid>.*: left by a launcher killed while unpacking, or by a removal cut short."""
    pid = entry.name[len(UNPACKING) :].split(".", 1)[0]
    if not pid.isdigit() or int(pid) == os.getpid():
        return
    try:
        os.kill(int(pid), 0)
        return  # still unpacking (or removing)
    except ProcessLookupError:
        pass
    except PermissionError:
        return
    shutil.rmtree(entry, ignore_errors=True)


def start_from_launcher() -> None:
    """Called first by the binary's entry point: hold this build, or start over from the launcher."""
    launcher = launcher_path()
    if launcher is None:
        return
    build_dir = Path(sys.executable).resolve().parent
    if hold_and_prune(build_dir) is None:
        os.execv(launcher, [launcher, *sys.argv[1:]])
