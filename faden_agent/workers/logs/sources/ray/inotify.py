"""inotify through libc (ctypes): the Ray log source waits in the kernel for a change instead
of listing its directories twice a second.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

from faden_agent.common.wakeable import Wakeable

IN_MODIFY = 0x002
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

DIR_EVENTS = IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
FILE_EVENTS = IN_MODIFY  # appends and truncation
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)
READ_BYTES = 64 * 1024  # about 2,000 events a read; more stay queued for the next

_libc = None


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(result: int) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


class Changes:
    __slots__ = ("wds", "gone", "overflow")

    def __init__(self, wds: set[int] | None = None, gone: set[int] | None = None, overflow: bool = False) -> None:
        self.wds: set[int] = set() if wds is None else wds  # watches that saw an event
        self.gone: set[int] = set() if gone is None else gone  # watches the kernel removed (IN_IGNORED)
        self.overflow = overflow  # the kernel's queue overflowed: events were lost


class Inotify:
    def __init__(self) -> None:
        self.fd = _check(_lib().inotify_init1(IN_NONBLOCK | IN_CLOEXEC))
        self._waiter = Wakeable(self.fd)

    def add(self, fd: int, mask: int) -> int:
        """Watch the inode open as `fd`; the same inode twice gives the same watch."""
        return _check(_lib().inotify_add_watch(self.fd, f"/proc/self/fd/{fd}".encode(), mask))

    def remove(self, wd: int) -> None:
        _lib().inotify_rm_watch(self.fd, wd)  # gone already (EINVAL) is fine

    def wait(self, timeout_s: float | None) -> Changes | None:
        """The events queued, after waiting for the first at most timeout_s (None: until one
        or a wake()); None when the wait timed out or was woken."""
        if not self._waiter.wait(timeout_s):
            return None
        changes = Changes()
        while True:
            try:
                data = os.read(self.fd, READ_BYTES)
            except BlockingIOError:
                return changes
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                offset += _EVENT.size + length
                if mask & IN_Q_OVERFLOW:
                    changes.overflow = True
                elif mask & IN_IGNORED:
                    changes.gone.add(wd)
                else:
                    changes.wds.add(wd)

    def wake(self) -> None:
        self._waiter.wake()

    def close(self) -> None:
        self._waiter.close()
        try:
            os.close(self.fd)
        except OSError:
            pass


class TreeWatch:
    """The Ray log tree's watches: directories (a change: list that directory again) and
    tailed files (a change: read again). At most `max_dirs` directory watches per container:
    past it the oldest session's watches make room for a newer one (Ray writes to its newest
    session), and what is left unwatched is found by the caller's periodic full listing.
    inotify failing (ENOSPC: the user's watch limit) turns the source back to polling;
    `problem` says why (shown in the source's status)."""

    def __init__(self, max_dirs: int):
        self.max_dirs = max_dirs
        self.inotify: Inotify | None = None  # until start(): nothing watched, status None
        self.started = False
        self._forget()

    def _forget(self) -> None:
        self.dirs: dict[int, tuple[str, ...]] = {}  # wd -> the directory's parts ((): the root)
        self.by_container: dict[str, set[int]] = {}  # container -> its directory watches
        self.files: set[int] = set()
        self.unwatched: dict[str, int] = {}  # container -> directories left to the full listing
        self.dirty: set[tuple[str, ...]] = set()  # directories that changed since the last take_dirty
        self.full = False  # events were lost (or a watched directory went): list everything
        self.problem: str | None = None

    def start(self) -> None:
        """Watch afresh (each run of the reader): what an earlier run watched and saw is
        dropped, and a new inotify instance takes the watches."""
        self.close()
        self._forget()
        self.started = True
        try:
            self.inotify = Inotify()
        except OSError as exc:
            self.problem = f"inotify unavailable ({exc.strerror or exc})"

    @property
    def polling(self) -> bool:
        return self.inotify is None or self.problem is not None

    def status(self) -> str | None:
        if not self.started:
            return None
        if self.problem:
            return f"polling: {self.problem}"
        if self.unwatched:
            shown = ", ".join(sorted(self.unwatched)[:5])
            return f"inotify; older sessions of {shown} past {self.max_dirs} directories: listed every rescan"
        return "inotify"

    def begin_listing(self) -> None:
        """A full listing starts: it counts the directories left unwatched afresh."""
        self.unwatched.clear()

    def watch_dir(self, fd: int, parts: tuple[str, ...]) -> None:
        if self.inotify is None or self.problem:
            return
        container = parts[0] if parts else ""
        mine = self.by_container.setdefault(container, set())
        if len(mine) >= self.max_dirs and not self._evict_older(mine, parts):
            self.unwatched[container] = self.unwatched.get(container, 0) + 1
            return
        wd = self._add(fd, DIR_EVENTS)
        if wd is not None:
            self.dirs[wd] = parts
            mine.add(wd)

    def _evict_older(self, mine: set[int], parts: tuple[str, ...]) -> bool:
        """Unwatch the oldest session directory below `parts` (session names sort by time)."""
        sessions = [wd for wd in mine if len(self.dirs.get(wd, ())) >= 2]
        if not sessions or len(parts) < 2:
            return False
        oldest = min(sessions, key=lambda wd: self.dirs[wd])
        if self.dirs[oldest][:2] >= parts[:2]:
            return False
        assert self.inotify is not None
        self.inotify.remove(oldest)
        mine.discard(oldest)
        del self.dirs[oldest]
        return True

    def watch_file(self, fd: int) -> int | None:
        if self.inotify is None or self.problem:
            return None
        wd = self._add(fd, FILE_EVENTS)
        if wd is not None:
            self.files.add(wd)
        return wd

    def unwatch_file(self, wd: int | None) -> None:
        if wd is not None and self.inotify is not None and wd in self.files:
            self.files.discard(wd)
            self.inotify.remove(wd)

    def _add(self, fd: int, mask: int) -> int | None:
        assert self.inotify is not None
        try:
            return self.inotify.add(fd, mask)
        except OSError as exc:
            self.problem = f"cannot watch ({exc.strerror or exc})"
            return None

    def wait(self, timeout_s: float) -> bool | None:
        """Wait for a change; True when directories changed (take_dirty names them). False:
        only tailed files grew. None: timed out (or woken)."""
        assert self.inotify is not None
        changes = self.inotify.wait(timeout_s)
        if changes is None:
            return None
        if changes.overflow:
            self.full = True
        for wd in changes.gone:
            parts = self.dirs.pop(wd, None)
            if parts is not None:
                self.by_container.get(parts[0] if parts else "", set()).discard(wd)
                self.dirty.add(parts[:-1])  # its parent lost an entry
            self.files.discard(wd)
        for wd in changes.wds:
            parts = self.dirs.get(wd)
            if parts is not None:
                self.dirty.add(parts)
        return self.full or bool(self.dirty)

    def take_dirty(self) -> set[tuple[str, ...]] | None:
        """The directories to list again; None: all of them."""
        dirty, full = self.dirty, self.full
        self.dirty, self.full = set(), False
        return None if full else dirty

    def wake(self) -> None:
        if self.inotify is not None:
            self.inotify.wake()

    def close(self) -> None:
        if self.inotify is not None:
            self.inotify.close()
            self.inotify = None
