"""Opening files inside a directory that a container controls (the Ray log mount), safely by
construction.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator

O_PROBE = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
O_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC  # O_NONBLOCK: never wait on open or read
MAX_DIR_ENTRIES = 1000  # entries looked at per directory and scan: a million files cost no more
MAX_NAME_CHARS = 128
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9_.:@+-]")


class Refused(Exception):
    """An entry that is not what it must be; reason is one of REASONS."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


REASONS = (
    "symlink",
    "not_regular",
    "not_directory",
    "other_device",
    "hard_link",
    "unreadable",
    "too_many_files",
    "too_many_entries",
    "bad_name",
)


def safe_name(name: str) -> str:
    """A file or directory name as a metadata value: safe characters only, bounded."""
    return _UNSAFE_CHARS.sub("_", name)[:MAX_NAME_CHARS]


def _probe(name: str, dir_fd: int, device: int | None) -> tuple[int, os.stat_result]:
    """An O_PATH descriptor of `name` itself (never what it points to) and its fstat."""
    if "/" in name or name in ("", ".", ".."):
        raise Refused("bad_name")
    try:
        fd = os.open(name, O_PROBE, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise Refused("unreadable") from exc
    st = os.fstat(fd)
    if stat.S_ISLNK(st.st_mode):
        os.close(fd)
        raise Refused("symlink")
    if device is not None and st.st_dev != device:
        os.close(fd)
        raise Refused("other_device")
    return fd, st


def _reopen(probe_fd: int, flags: int) -> int:
    try:
        return os.open(f"/proc/self/fd/{probe_fd}", flags)
    except OSError as exc:
        raise Refused("unreadable") from exc
    finally:
        os.close(probe_fd)


def open_dir(name: str, dir_fd: int, device: int | None) -> tuple[int, int]:
    """(descriptor for listing and *at calls, device) of the directory `name` under dir_fd."""
    fd, st = _probe(name, dir_fd, device)
    if not stat.S_ISDIR(st.st_mode):
        os.close(fd)
        raise Refused("not_directory")
    return _reopen(fd, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), st.st_dev


def open_file(name: str, dir_fd: int, device: int) -> tuple[int, os.stat_result]:
    """A read descriptor of the regular, singly linked file `name` under dir_fd, and its fstat."""
    fd, st = _probe(name, dir_fd, device)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Refused("not_regular")
    if st.st_nlink > 1:
        os.close(fd)
        raise Refused("hard_link")
    return _reopen(fd, O_READ), st


def identity_at(root_fd: int, parts: tuple[str, ...]) -> tuple[int, int] | None:
    """(device, inode) of the entry at root/parts, None when absent or not a safe path;
    no component is followed."""
    fds: list[int] = []
    try:
        fd, device = root_fd, None
        for name in parts[:-1]:
            fd, device = open_dir(name, fd, device)
            fds.append(fd)
        st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        return (st.st_dev, st.st_ino)
    except (FileNotFoundError, NotADirectoryError, Refused):
        return None
    finally:
        for fd in fds:
            os.close(fd)


def entries(dir_fd: int) -> Iterator[os.DirEntry]:
    """The directory's entries (names only, nothing followed), at most MAX_DIR_ENTRIES;
    raises Refused("too_many_entries") after yielding that many when there are more."""
    with os.scandir(dir_fd) as listing:
        for count, entry in enumerate(listing):
            if count >= MAX_DIR_ENTRIES:
                raise Refused("too_many_entries")
            yield entry
