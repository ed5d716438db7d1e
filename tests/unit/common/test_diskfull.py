"""diskfull.retry_when_full: threads wait out a full disk, a worker's main loop never does."""

from __future__ import annotations

import errno
import sqlite3
import threading

import pytest

from faden_agent.disk.diskfull import DISK, DiskFull, is_disk_full, retry_when_full, writes_file


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
    monkeypatch.setattr("faden_agent.disk.diskfull.RETRY_S", 0.01)
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


def test_writes_file_makes_each_call_of_a_method_a_write_of_self_path(tmp_path, monkeypatch):
    """The one decorator the journal and the outbox share: the method is retried while the
    disk is full (in a thread), with the same arguments, and the state names self.path."""
    monkeypatch.setattr("faden_agent.disk.diskfull.RETRY_S", 0.01)

    class File:
        path = tmp_path / "file.sqlite"

        def __init__(self) -> None:
            self.write_once = FullFor(2)
            self.seen: list[tuple] = []

        @writes_file
        def put(self, *args: object) -> str:
            self.seen.append(args)
            return self.write_once()

    file, result = File(), []
    thread = threading.Thread(target=lambda: result.append(file.put("a", 1)))
    thread.start()
    thread.join(10)
    assert result == ["written"] and file.seen == [("a", 1)] * 3 and DISK.snapshot() is None
    with pytest.raises(DiskFull) as caught:  # the main thread: at once
        File().put("b")
    assert caught.value.path == str(File.path)
    assert DISK.written(File.path)  # leave no full path behind for other tests
