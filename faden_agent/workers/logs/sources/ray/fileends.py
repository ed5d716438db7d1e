"""Ray log files' ends: beside the position of a file that takes no more writes (rotated
away), the offset its position reaches once all of it was accepted. A position whose file
is gone from every followed name is a loss (rotated_before_read) unless it reached that end;
a file whose directory is gone was deleted with its tree (retention), not rotated.
"""

from __future__ import annotations

import os
import stat

from faden_agent.workers.logs.positions import Positions
from faden_agent.workers.logs.sources import RAY

END_PREFIX = "file-end:"  # beside "file:<dev>:<ino>" (RAY.key_prefix), the position of the same file
KEY_PREFIX = RAY.key_prefix + ":"


def position_key(ident: tuple[int, int]) -> str:
    return f"{KEY_PREFIX}{ident[0]}:{ident[1]}"


def end_key(key: str) -> str:
    return END_PREFIX + key.removeprefix(KEY_PREFIX)


class FileEnds:
    def __init__(self, positions: Positions):
        self.positions = positions

    def record(self, key: str, end: int) -> None:
        """The file of `key` takes no more writes; its position is complete at `end`."""
        self.positions.advance({end_key(key): end})  # saved with the next positions save

    def known(self, key: str) -> bool:
        return self.positions.get(end_key(key)) is not None

    def drop(self, key: str) -> None:
        self.positions.forget(end_key(key))

    def complete(self, key: str) -> bool:
        """Whether the file's end is known and its position reached it."""
        stored, end = self.positions.get(key), self.positions.get(end_key(key))
        offset = stored.get("offset") if isinstance(stored, dict) else None
        return type(end) is int and type(offset) is int and offset >= end

    def forget_complete(self, key: str) -> None:
        """A finished file no longer seen: its position and end go once it is complete."""
        if self.complete(key):
            self.positions.forget(key)
            self.drop(key)

    def gone(self, key: str) -> bool:
        """Forget a position whose file no followed name holds; True when lines of it may
        never have been accepted: rotated (or deleted) away before it was read to its end."""
        stored, complete = self.positions.get(key), self.complete(key)
        self.positions.forget(key)
        self.drop(key)
        path = stored.get("path") if isinstance(stored, dict) else None
        if complete or not isinstance(path, str):
            return False
        try:
            if not stat.S_ISDIR(os.lstat(os.path.dirname(path)).st_mode):
                return False
        except OSError:
            return False  # its directory went with its tree: not a rotation
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return True  # its directory is there, the file is not: rotated away, or deleted
        except OSError:
            return False
        return position_key((st.st_dev, st.st_ino)) != key  # still there: listed late, not lost

    def forget_orphans(self) -> None:
        """Ends whose position went (a file forgotten elsewhere)."""
        for key in self.positions.keys(END_PREFIX):
            if self.positions.get(KEY_PREFIX + key.removeprefix(END_PREFIX)) is None:
                self.positions.forget(key)
