"""A power cut as the backend sees it: the machine's TCP connections stay open (no FIN, no
RST) after its processes are gone. Before the test SIGKILLs the agent, `hold_connections`
takes a copy of each socket the agent's processes hold to a port (pidfd_getfd, the kernel's
own duplicate); while the copies are open the backend's end sees a peer that went silent.

    with hold_connections(agent_pids, backend_port):
        agent.kill()   # SIGKILL for real; the backend's streams stay "open"
        ...            # restart and check; the copies close on leaving the block
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

SYS_PIDFD_GETFD = 438  # the same number on x86_64 and aarch64 (asm-generic)
_libc = ctypes.CDLL(None, use_errno=True)


def _socket_inodes(pid: int) -> dict[int, int]:
    """fd -> socket inode of one process."""
    out = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        match = re.fullmatch(r"socket:\[(\d+)\]", target)
        if match:
            out[int(name)] = int(match.group(1))
    return out


def _inodes_to_port(pid: int, port: int) -> set[int]:
    """Inodes of the process's established TCP connections whose remote port is `port`."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as fh:
            next(fh)
            for line in fh:
                parts = line.split()
                remote_port = int(parts[2].rsplit(":", 1)[1], 16)
                if remote_port == port and parts[3] == "01":  # ESTABLISHED
                    inodes.add(int(parts[9]))
    return inodes


def _pidfd_getfd(pid: int, fd: int) -> int:
    pidfd = os.pidfd_open(pid)
    try:
        copy = _libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
        if copy < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"pidfd_getfd({pid}, {fd}): {os.strerror(err)}")
        return copy
    finally:
        os.close(pidfd)


@contextmanager
def hold_connections(pids: Iterable[int], port: int) -> Iterator[list[int]]:
    """Copies of every established connection of `pids` to `port` (closed on exit)."""
    copies: list[int] = []
    try:
        for pid in pids:
            wanted = _inodes_to_port(pid, port)
            for fd, inode in _socket_inodes(pid).items():
                if inode in wanted:
                    copies.append(_pidfd_getfd(pid, fd))
        yield copies
    finally:
        for fd in copies:
            os.close(fd)
