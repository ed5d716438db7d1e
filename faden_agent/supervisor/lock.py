"""One agent per state directory (and per runtime directory)."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

LOCK_FILE = "agent.lock"


class AlreadyRunning(OSError):
    """Another agent holds the lock (an OSError: the CLI reports it as a failed start)."""


def acquire(directory: Path, what: str) -> int:
    """Lock `directory`/agent.lock for this process; returns the fd (keep it open)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise AlreadyRunning(
            errno.EWOULDBLOCK,
            f"another faden-agent (pid {holder[:20]}) is running with the {what} "
            f"{directory}; stop it first (one agent per {what})",
        ) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)  # who holds it, for the second one's message
    except OSError:
        pass  # a full disk: the lock holds all the same
    return fd
