"""diskfull.retry_when_full: threads wait out a full disk, a worker's main loop never does."""

from __future__ import annotations

import errno
import sqlite3
import threading

import pytest

from faden_agent.diskfull import DISK, DiskFull, is_disk_full, retry_when_full


class FullFor:
    """A write that fails with ENOSPC `n` times, then succeeds."""

    def __init__(self, n: int):
        self.left = n
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.left:
            self.left -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return "written"


def test_the_main_thread_gets_disk_full_at_once_and_the_state_names_the_path(tmp_path):
    path = tmp_path / "outbox.sqlite"
    write = FullFor(5)
    with pytest.raises(DiskFull) as caught:
        retry_when_full(write, path)
    assert write.calls == 1 and caught.value.path == str(path)
    assert DISK.snapshot()["path"] == str(path)
    assert retry_when_full(FullFor(0), path) == "written"
    assert DISK.snapshot() is None


def test_a_thread_waits_until_there_is_space_and_other_errors_pass(tmp_path, monkeypatch):
    monkeypatch.setattr("faden_agent.diskfull.RETRY_S", 0.01)
    write, result = FullFor(3), []
    thread = threading.Thread(target=lambda: result.append(retry_when_full(write, tmp_path / "j")))
    thread.start()
    thread.join(10)
    assert result == ["written"] and write.calls == 4 and DISK.snapshot() is None

    def broken() -> None:
        raise OSError(errno.EACCES, "Permission denied")

    errors = []
    thread = threading.Thread(
        target=lambda: errors.append(pytest.raises(PermissionError, retry_when_full, broken, "x"))
    )
    thread.start()
    thread.join(10)
    assert errors


def test_sqlite_full_is_disk_full_and_other_sqlite_errors_are_not():
    full = sqlite3.OperationalError("database or disk is full")
    assert is_disk_full(full)
    assert not is_disk_full(sqlite3.OperationalError("database is locked"))
