"""Ray Serve log files: tailed by inode+offset, through rename rotation (Python's
RotatingFileHandler, which Ray Serve uses) and truncation, without losing a line."""

from __future__ import annotations

import logging
import logging.handlers
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from faden_agent.config import load_config
from faden_agent.workers.logs.backlog import Backlog
from faden_agent.workers.logs.labels import LabelMaker
from faden_agent.workers.logs.positions import Positions
from faden_agent.workers.logs.sources import Shared
from faden_agent.workers.logs.sources.managed import ManagedNames
from faden_agent.workers.logs.sources.ray import refusals, tailing, tree
from faden_agent.workers.logs.sources.ray import source as files
from faden_agent.workers.logs.sources.ray.source import RaySource
from faden_agent.workers.threads import start_daemon
from tests.support.raylogs import Collector, serve_dir


def start_source(tmp_path: Path, ray_dir: Path):
    config = load_config(
        {}, agent_id="a", advertise_host="h", state_path=tmp_path / "state" / "s.json", ray_log_dir=ray_dir
    )
    backlog, positions, stop = Backlog(max_lines=50), Positions(config.state_dir), threading.Event()
    source = RaySource(Shared(config, backlog, positions, LabelMaker(config), stop, start_daemon), ManagedNames())
    source.start()
    return source, Collector(backlog, positions), stop


def test_rename_rotation_while_reading_loses_no_line(tmp_path):
    ray_dir = tmp_path / "ray"
    serve = serve_dir(ray_dir)
    logger = logging.getLogger("test-ray-serve-rotation")
    logger.propagate = False
    handler = logging.handlers.RotatingFileHandler(serve / "replica_app_Model_abc.log", maxBytes=20_000, backupCount=50)
    handler.setFormatter(logging.Formatter("%(levelname)s %(asctime)s replica 7 -- %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    source, collector, stop = start_source(tmp_path, ray_dir)
    try:
        total, written, held_rotations = 3000, 0, 0
        roll_over = handler.doRollover

        def roll_over_under_the_reader() -> None:
            # The first 5 rotations wait until the reader has the file (all its lines but the
            # last, which it may hold to join what follows): each one renames a file held open.
            nonlocal held_rotations
            if held_rotations < 5:
                collector.wait(written - 1)
                held_rotations += 1
            roll_over()

        handler.doRollover = roll_over_under_the_reader  # type: ignore[method-assign]
        for i in range(total):
            logger.info("request %05d done", i)
            written += 1
            if i % 100 == 0:
                time.sleep(0.02)  # let the reader interleave with the writer
        handler.close()
        collector.wait(total)
        numbers = [int(e.line.split("request ")[1].split()[0]) for e in collector.lines]
        missing = sorted(set(range(total)) - set(numbers))
        out_of_order = next((i for i in range(len(numbers) - 1) if numbers[i + 1] != numbers[i] + 1), None)
        around = numbers[out_of_order : out_of_order + 3] if out_of_order is not None else ""
        assert numbers == list(range(total)), (
            f"missing {missing[:5]} ({len(missing)}), {len(numbers)} read, order breaks at {out_of_order}: {around}"
        )
        assert source.tailing.rotations >= 5  # the files really rotated under the reader
        first = collector.lines[0]
        assert dict(first.stream)["container"] == "ray-head-1" and dict(first.stream)["file"] == "replica"
        assert first.metadata == {"filename": "replica_app_Model_abc.log", "session": "session_2024-01-01_00-00-00_1"}
    finally:
        stop.set()
        logger.removeHandler(handler)


def test_a_restart_resumes_at_the_accepted_offset_and_truncation_restarts_the_file(tmp_path):
    ray_dir = tmp_path / "ray"
    log_file = serve_dir(ray_dir) / "controller_12.log"
    log_file.write_text("".join(f"INFO 2024-05-01 10:00:0{i},000 controller 12 -- step {i}\n" for i in range(5)))
    source, collector, stop = start_source(tmp_path, ray_dir)
    collector.wait(5)
    stop.set()
    source.thread.join(5)
    collector.positions.save(force=True)
    assert [e.ts_ns for e in collector.lines][:2] == [1714557600_000000000, 1714557601_000000000]
    with open(log_file, "a") as fh:
        fh.write("INFO 2024-05-01 10:00:09,000 controller 12 -- step 5\n  a traceback line\n")
    source, collector, stop = start_source(tmp_path, ray_dir)
    collector.wait(1)
    time.sleep(0.5)
    # The line without a stamp continues the one before it: one entry, with that line's stamp.
    assert [e.line.split(" -- ")[-1] for e in collector.lines] == ["step 5\n  a traceback line"]
    assert collector.lines[0].ts_ns == 1714557609_000000000
    assert collector.lines[0].position["offset"] == log_file.stat().st_size  # after its last line
    log_file.write_text("INFO 2024-05-01 11:00:00,000 controller 12 -- after truncate\n")
    collector.wait(2)
    assert collector.lines[-1].line.endswith("after truncate") and source.tailing.truncations == 1
    assert source.lines_lost == 0  # read to its end before the truncation: nothing lost
    stop.set()


@pytest.mark.parametrize("copy", [False, True], ids=["truncated", "copytruncate-to-x.log.1"])
def test_a_file_truncated_past_lines_seen_unread_is_a_loss_unless_its_copy_is_followed(tmp_path, monkeypatch, copy):
    """Truncation while the reader is behind (its read budget cut to 2 KB/s here): the lines
    seen in the file and not read went with it: a logs.lines_lost, rotated_before_read, at
    least 1, and the file is read again from its start. Copied first to a name followed
    (logrotate's copytruncate, x.log.1), they come from the copy: no loss."""
    reports = _loss_reports(monkeypatch)
    monkeypatch.setattr(tailing, "READ_RATE_BYTES", 2000)
    ray_dir = tmp_path / "ray"
    log_file = serve_dir(ray_dir) / "controller_12.log"
    log_file.write_text("".join(f"INFO 2024-05-01 10:00:00,000 controller 12 -- line {i:04d}\n" for i in range(120)))
    source, collector, stop = start_source(tmp_path, ray_dir)
    try:
        collector.wait(5)
        if copy:
            shutil.copyfile(log_file, log_file.with_name("controller_12.log.1"))
        log_file.write_text("INFO 2024-05-01 11:00:00,000 controller 12 -- after truncate\n")  # truncates
        deadline = time.monotonic() + 30
        while not collector.lines[-1].line.endswith("after truncate") and time.monotonic() < deadline:
            time.sleep(0.05)
        read = [e.line.rsplit(" ", 1)[-1] for e in collector.lines]
        assert read[-1] == "truncate" and source.tailing.truncations == 1
        lost = [
            (r["source"], r["count"], r["at_least"], r["reason"]) for r in reports if r["type"] == "logs.lines_lost"
        ]
        if copy:
            assert set(read[:-1]) == {f"{i:04d}" for i in range(120)}  # from the copy, the first ones twice
            assert source.lines_lost == 0 and lost == []
        else:
            assert 5 <= len(read) - 1 < 120  # the rest went with the truncation
            assert source.lines_lost == 1 and lost == [("ray-serve", 1, True, "rotated_before_read")]
    finally:
        _stop(source, collector, stop)


def join(source, timeout_s: float = 5.0) -> None:
    getattr(source, "thread", None).join(timeout_s) if getattr(source, "thread", None) else source.join(timeout_s)


def test_hostile_entries_are_refused_once_and_never_followed(tmp_path, monkeypatch):
    """Every kind of hostile entry a container can make under its log mount, side by side
    with a good file; the good file ships, nothing else is opened for reading."""

    reports = []
    monkeypatch.setattr(refusals, "report_event", lambda config, data, record_id=None: reports.append(data) or True)
    secret_dir = tmp_path / "host"
    secret_dir.mkdir()
    secret = secret_dir / "credential.log"
    secret.write_text("SECRET-TOKEN-1\n")
    ray_dir = tmp_path / "ray"
    serve = serve_dir(ray_dir)
    session = serve.parent.parent
    (serve / "good_1.log").write_text("INFO 2024-05-01 10:00:00,000 good line\n")
    (serve / "secret.log").symlink_to(secret)
    (serve / "zero.log").symlink_to("/dev/zero")
    os.mkfifo(serve / "fifo.log")
    os.link(secret, serve / "hard.log")
    (serve / "loop.log").symlink_to("loop.log")
    (serve / "dir.log").mkdir()
    (session.parent / "session_loop").symlink_to("session_loop")  # a directory symlink loop
    escape = session.parent / "session_escape" / "logs"
    escape.mkdir(parents=True)
    (escape / "serve").symlink_to(secret_dir)  # a directory symlink out of the mount
    (session.parent / "session_latest").symlink_to(session.name)  # Ray's own: ignored, not reported
    (serve.parent / "raylet.out").symlink_to(secret)  # Ray's own files: the same rules
    os.mkfifo(serve.parent / "gcs_server.out")
    source, collector, stop = start_source(tmp_path, ray_dir)
    try:
        collector.wait(1)
        time.sleep(1.5)  # a few more scans: each entry is still reported once
        assert [e.line for e in collector.lines] == ["INFO 2024-05-01 10:00:00,000 good line"]
        refused = source.status()["refused"]
        assert refused == {"symlink": 6, "not_regular": 3, "hard_link": 1}, refused
        assert source.status()["refused_total"] == 10
        assert len(reports) == 10 and {r["type"] for r in reports} == {"logs.entry_refused"}
        assert not any("SECRET" in str(r) for r in reports)
    finally:
        stop.set()
        join(source)


def test_a_filesystem_mounted_inside_the_log_mount_is_refused(tmp_path, monkeypatch):
    """Another device under the container's directory (e.g. a tmpfs) is never entered."""
    import subprocess

    import pytest

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    monkeypatch.setattr(refusals, "report_event", lambda config, data, record_id=None: True)
    ray_dir = tmp_path / "ray"
    serve = serve_dir(ray_dir)
    (serve / "good_1.log").write_text("good\n")
    other = ray_dir / "ray-head-1" / "session_other"
    other.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(other)], check=True)
    try:
        (other / "logs" / "serve").mkdir(parents=True)
        (other / "logs" / "serve" / "elsewhere.log").write_text("from another device\n")
        source, collector, stop = start_source(tmp_path, ray_dir)
        try:
            collector.wait(1)
            time.sleep(1)
            assert [e.line for e in collector.lines] == ["good"]
            assert source.status()["refused"] == {"other_device": 1}
        finally:
            stop.set()
            join(source)
    finally:
        subprocess.run(["umount", str(other)], check=True)


def _switches(thread: threading.Thread) -> int:
    text = Path(f"/proc/self/task/{thread.native_id}/status").read_text()
    return int(next(line for line in text.splitlines() if line.startswith("voluntary_ctxt_switches")).split()[1])


def test_the_tree_is_watched_not_polled_and_new_dirs_files_and_lines_are_found(tmp_path):
    """An idle source waits in the kernel (inotify), yet a Ray log directory made
    after the start, a session made later, a new file and an appended line are all read;
    past the watch budget, older sessions give up their watches (test_1000_sessions_...)."""
    ray_dir = tmp_path / "ray"  # not there yet: its parent is watched
    source, collector, stop = start_source(tmp_path, ray_dir)
    try:
        serve = serve_dir(ray_dir)
        (serve / "replica.log").write_text("INFO 2024-01-01 00:00:01,000 first\n")
        collector.wait(1)
        assert [e.line for e in collector.lines] == ["INFO 2024-01-01 00:00:01,000 first"]
        assert source.status()["watching"] == "inotify"
        with open(serve / "replica.log", "a") as f:
            f.write("INFO 2024-01-01 00:00:02,000 second\n")
        collector.wait(2)
        later = ray_dir / "ray-head-1" / "session_2024-01-02_00-00-00_2" / "logs" / "serve"
        later.mkdir(parents=True)
        (later / "controller.log").write_text("INFO 2024-01-02 00:00:01,000 third\n")
        collector.wait(3)
        assert [e.line.split()[-1] for e in collector.lines] == ["first", "second", "third"]
        time.sleep(2.0)  # settled: the next window is idle
        before = _switches(source.thread)
        time.sleep(4.0)
        assert _switches(source.thread) - before <= 3  # polling every 0.5 s: 8 or more
    finally:
        stop.set()
        source.stop()
        source.thread.join(5)
    assert not source.thread.is_alive()


def test_a_ray_directory_made_just_before_its_parent_is_watched_is_found(tmp_path, monkeypatch):
    """The directory appears after the source's first try to open it and before the watch on
    its parent is in place, so no event tells of it: the source tries again once the parent
    is watched, not at the 60 s rescan."""
    ray_dir = tmp_path / "ray"
    real_open_dir = tree.open_own_dir

    def made_in_between(path):
        fd = real_open_dir(path)
        if os.fspath(path) == str(ray_dir) and fd is None and not ray_dir.exists():
            (serve_dir(ray_dir) / "replica.log").write_text("INFO 2024-01-01 00:00:01,000 first\n")
        return fd

    monkeypatch.setattr(tree, "open_own_dir", made_in_between)
    source, collector, stop = start_source(tmp_path, ray_dir)
    try:
        collector.wait(1, timeout_s=10)
        assert [e.line for e in collector.lines] == ["INFO 2024-01-01 00:00:01,000 first"]
        assert source.status()["watching"] == "inotify"
    finally:
        stop.set()
        source.stop()
        source.thread.join(5)


def _cpu_s(thread: threading.Thread) -> float:
    fields = Path(f"/proc/self/task/{thread.native_id}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _timed_full_scan(source) -> float:
    """CPU seconds of one full listing of the tree, as the safety net makes it."""
    root_fd = os.open(source.config.ray_log_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        started = time.thread_time()
        source.tree.scan(root_fd, False, None)
        return time.thread_time() - started
    finally:
        os.close(root_fd)


def test_1000_sessions_are_watched_and_listed_again_only_where_they_change(tmp_path):
    """Past the watch budget the oldest sessions give up their watches to newer ones, and a
    change lists only the directory it happened in: no re-walk of the whole tree, and no
    polling of a container past its watch budget."""
    ray_dir = tmp_path / "ray"
    container = ray_dir / "ray-head-1"
    for i in range(1000):
        (container / f"session_2024-01-01_00-00-00_{i:04d}" / "logs" / "serve").mkdir(parents=True)
    newest = container / "session_2024-01-01_00-00-00_0999" / "logs" / "serve"
    (newest / "replica.log").write_text("INFO 2024-01-01 00:00:01,000 line 0\n")
    source, collector, stop = start_source(tmp_path, ray_dir)
    try:
        collector.wait(1, timeout_s=60)
        first_scan_cpu = _cpu_s(source.thread)
        assert source.tree.scans == {"full": 1, "partial": 0}
        opened_before, cpu_before, started = source.tree.dirs_opened, _cpu_s(source.thread), time.monotonic()
        with open(newest / "replica.log", "a") as log:
            for i in range(1, 31):
                log.write(f"INFO 2024-01-01 00:00:02,000 line {i}\n")
                log.flush()
                time.sleep(0.1)
                if i == 10:  # a new file in a watched session
                    (newest / "proxy.log").write_text("INFO 2024-01-01 00:00:03,000 line proxy\n")
                if i == 20:  # a new session: past the budget, it takes the oldest one's watches
                    later = container / "session_2024-01-02_00-00-00_9999" / "logs" / "serve"
                    later.mkdir(parents=True)
        collector.wait(32, timeout_s=20)
        (later / "controller.log").write_text("INFO 2024-01-02 00:00:01,000 line later\n")  # found by its watch
        collector.wait(33, timeout_s=5)
        window_s, cpu_s = time.monotonic() - started, _cpu_s(source.thread) - cpu_before
        opened = source.tree.dirs_opened - opened_before
        stop.set()
        source.stop()
        source.thread.join(5)
        full_s = _timed_full_scan(source)  # on this thread, the source's own one ended
        source.tailing.close_all()
        assert {e.line.split("line ")[-1] for e in collector.lines} == {
            *map(str, range(31)),
            "proxy",
            "later",
        }
        print(
            f"\n1000 sessions: first listing {first_scan_cpu:.2f} s CPU; then {window_s:.1f} s of appends, 2 new"
            f" files and a new session: {cpu_s:.2f} s CPU ({100 * cpu_s / window_s:.1f} % of a core),"
            f" scans {source.tree.scans}, {opened} directories opened; a full listing (every {files.RESCAN_S:g} s):"
            f" {full_s:.2f} s CPU, {100 * full_s / files.RESCAN_S:.2f} % of a core"
        )
        assert source.tree.scans["full"] == 2  # the first and the timed one: the 60 s safety net did not come round
        assert opened < 30  # a walk of the tree opens 3,001
        assert source.status()["watching"].startswith("inotify; older sessions of ray-head-1")
    finally:
        stop.set()
        source.stop()
        source.thread.join(5)


def test_a_1_tib_sparse_file_and_written_nul_runs_ship_no_nul_line(tmp_path):
    """A hole costs the tenant no disk, so a reader must not ship it as NUL lines: holes are
    jumped over (SEEK_DATA), written NUL bytes dropped; both counted, neither shipped."""
    ray_dir = tmp_path / "ray"
    serve = serve_dir(ray_dir)
    sparse = serve / "replica_a.log"
    sparse.write_text("INFO 2024-01-01 00:00:01,000 first\n")
    os.truncate(sparse, 2**40)  # truncate -s 1T
    with open(sparse, "a") as f:
        f.write("INFO 2024-01-01 00:00:02,000 last\n")
    written = serve / "replica_b.log"
    written.write_bytes(b"\0" * 300_000 + b"INFO 2024-01-01 00:00:03,000 after\0\0 nul\n" + b"\0" * 70_000 + b"\n")
    source, collector, stop = start_source(tmp_path, ray_dir)
    try:
        started = time.monotonic()
        collector.wait(3, timeout_s=30)
        time.sleep(1.5)  # a held entry's wait bound: nothing more may come
        took = time.monotonic() - started
        assert sorted(e.line.split(",000 ")[-1] for e in collector.lines) == ["after nul", "first", "last"]
        assert all("\0" not in e.line for e in collector.lines)
        assert source.tailing.nul_bytes_skipped >= 2**40 + 370_000 - 64
        skipped = source.tailing.nul_bytes_skipped
        print(f"\n1 TiB sparse file and 370 kB of NUL bytes skipped in {took:.1f} s, {skipped} bytes")
    finally:
        stop.set()
        source.stop()
        source.thread.join(5)


def test_a_wrongly_typed_position_is_quarantined_for_that_file_alone(tmp_path):
    """Before, int() of one bad entry raised in the reader: no Ray file of any container was
    shipped again. Now that file starts afresh and is reported; the others resume."""
    import orjson

    ray_dir = tmp_path / "ray"
    serve = serve_dir(ray_dir)
    other = serve_dir(ray_dir, "ray-head-2")
    (serve / "replica.log").write_text("INFO 2024-01-01 00:00:01,000 bad-position line\n")
    done = "INFO 2024-01-01 00:00:01,000 shipped before\n"
    (other / "proxy.log").write_text(done + "INFO 2024-01-01 00:00:02,000 good-position line\n")
    bad, good = (os.stat(serve / "replica.log"), os.stat(other / "proxy.log"))
    state = tmp_path / "state"
    state.mkdir()
    (state / "logs-positions.json").write_bytes(
        orjson.dumps(
            {
                f"file:{bad.st_dev}:{bad.st_ino}": {"offset": "12abc", "ts": [1]},
                f"file:{good.st_dev}:{good.st_ino}": {"offset": len(done), "ts": 1704067201000000000},
            }
        )
    )
    source, collector, stop = start_source(tmp_path, ray_dir)
    try:
        collector.wait(2, timeout_s=15)
        time.sleep(1.5)
        assert sorted(e.line.split(",000 ")[-1] for e in collector.lines) == [
            "bad-position line",
            "good-position line",
        ]
        assert source.tree.positions_quarantined == 1 and source.last_error == ""
    finally:
        stop.set()
        source.stop()
        source.thread.join(5)


def test_more_files_than_the_open_bound_are_all_shipped_closing_idle_ones(tmp_path, monkeypatch):
    """Ray keeps ~3 files per worker process: past the open-file bound, files read to their
    end are closed to make room, so every file is shipped; one written again is reopened by
    the full listing where it was, nothing read twice."""
    monkeypatch.setattr(tailing, "MAX_OPEN_PER_CONTAINER", 4)
    monkeypatch.setattr(files, "RESCAN_S", 1.0)
    ray_dir = tmp_path / "ray"
    logs = serve_dir(ray_dir).parent
    for i in range(12):
        (logs / f"worker-{i:02d}-01000000-{100 + i}.out").write_text(f"INFO 2024-01-01 00:00:01,000 w{i} first\n")
    source, collector, stop = start_source(tmp_path, ray_dir)
    try:
        collector.wait(12, timeout_s=20)
        assert sorted(e.line.split()[-2] for e in collector.lines) == sorted(f"w{i}" for i in range(12))
        assert source.tailing.closed_idle >= 8 and len(source.tailing.tails) <= 4
        with open(logs / "worker-00-01000000-100.out", "a") as f:
            f.write("INFO 2024-01-01 00:00:02,000 w0 second\n")
        collector.wait(13, timeout_s=10)
        time.sleep(1.5)
        assert [e.line.split()[-2:] for e in collector.lines if " w0 " in e.line] == [["w0", "first"], ["w0", "second"]]
    finally:
        stop.set()
        source.stop()
        source.thread.join(5)


# A rotation scheme that keeps one rotated file: Python's RotatingFileHandler (backupCount=1)
# in serve/, spdlog's rotating sink (max_files=1) in logs/ (Ray's own C++ logs).
SCHEMES = {
    "python": (("serve",), "replica_app_Model_1.log", "replica_app_Model_1.log.1"),
    "spdlog": ((), "raylet.out", "raylet.1.out"),
}


class OneBackupLog:
    """A log file as Ray's writers keep it: appended to; rotated by rename, the oldest
    rotated file deleted."""

    def __init__(self, ray_dir: Path, scheme: str):
        below, self.live_name, self.rotated_name = SCHEMES[scheme]
        self.dir = serve_dir(ray_dir).parent.joinpath(*below)
        self.written = 0
        self.held = None

    def write(self, n: int) -> None:
        with open(self.dir / self.live_name, "a") as fh:
            for _ in range(n):
                fh.write(f"INFO 2024-05-01 10:00:{self.written % 60:02d},000 raylet.cc:1 -- line {self.written}\n")
                self.written += 1

    def rotate(self) -> None:
        # The deleted file is held open until the next rotation: the new live file cannot
        # take its inode (a reused inode reads as the old file truncated, from its start).
        self.held = open(self.dir / self.rotated_name) if (self.dir / self.rotated_name).exists() else None
        (self.dir / self.rotated_name).unlink(missing_ok=True)
        os.rename(self.dir / self.live_name, self.dir / self.rotated_name)
        (self.dir / self.live_name).touch()


def _loss_reports(monkeypatch) -> list:
    from faden_agent.workers.logs import sources

    reports: list = []
    monkeypatch.setattr(sources, "report_event", lambda config, data, record_id=None: reports.append(data) or True)
    return reports


def _stop(source, collector, stop) -> None:
    stop.set()
    source.stop()
    source.thread.join(5)
    collector.positions.save(force=True)
    time.sleep(0.05)  # what is written next is newer than the saved positions, as after a real stop


def _numbers(collector) -> list[int]:
    return [int(e.line.rsplit(" ", 1)[1]) for e in collector.lines]


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_a_file_rotated_away_twice_past_unread_lines_is_a_loss(tmp_path, monkeypatch, scheme):
    """The agent read x.log up to line 4 and stopped; lines 5-7 went into it, then it rotated
    twice (x.log -> x.log.1 -> deleted): its position names a file no followed name holds,
    with lines never read: a logs.lines_lost, rotated_before_read, at least 1. The file made
    and rotated meanwhile (line 8) is read, not skipped as older than the agent."""
    reports = _loss_reports(monkeypatch)
    ray_dir = tmp_path / "ray"
    log_file = OneBackupLog(ray_dir, scheme)
    log_file.write(5)
    source, collector, stop = start_source(tmp_path, ray_dir)
    collector.wait(5)
    _stop(source, collector, stop)
    log_file.write(3)  # while the agent is stopped: unread lines, then two rotations past them
    log_file.rotate()
    log_file.write(1)
    log_file.rotate()
    log_file.write(2)
    source, collector, stop = start_source(tmp_path, ray_dir)
    try:
        collector.wait(3)
        time.sleep(1.0)
        assert _numbers(collector) == [8, 9, 10]
        assert (source.lines_lost, source.lines_read) == (1, 4)
        lost = [r for r in reports if r["type"] == "logs.lines_lost"]
        assert [(r["source"], r["count"], r["at_least"], r["reason"]) for r in lost] == [
            ("ray-serve", 1, True, "rotated_before_read")
        ]
    finally:
        _stop(source, collector, stop)


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_rotations_read_in_time_report_no_loss_even_once_the_file_is_deleted(tmp_path, monkeypatch, scheme):
    """x.log rotates while the agent reads it (read to its end through its descriptor); the
    agent stops and the next rotation deletes that file: all of it was accepted before it
    went, so no loss is reported; nor for a whole session directory deleted."""
    reports = _loss_reports(monkeypatch)
    ray_dir = tmp_path / "ray"
    log_file = OneBackupLog(ray_dir, scheme)
    other_serve = serve_dir(ray_dir, "ray-head-2")
    (other_serve / "controller_1.log").write_text("INFO 2024-05-01 10:00:00,000 controller 1 -- line 99\n")
    log_file.write(5)
    source, collector, stop = start_source(tmp_path, ray_dir)
    try:
        collector.wait(6)
        log_file.write(2)
        log_file.rotate()  # held open: lines 5-6 come through its descriptor
        log_file.write(3)
        collector.wait(11)
        time.sleep(1.5)  # the rotated file read to its end and closed, its last line accepted
        assert sorted(_numbers(collector)) == [*range(10), 99]
        assert source.tailing.rotations == 1 and source.lines_lost == 0
        _stop(source, collector, stop)
        log_file.rotate()  # while stopped: the first file deleted, all of it accepted
        log_file.write(2)
        shutil.rmtree(other_serve.parent.parent)  # a tree deleted whole is no rotation
        source, collector, stop = start_source(tmp_path, ray_dir)
        collector.wait(2)
        time.sleep(1.0)
        assert _numbers(collector) == [10, 11]
        assert source.lines_lost == 0 and [r for r in reports if r["type"] == "logs.lines_lost"] == []
        assert collector.positions.keys("file-end:") == []  # the deleted file's end went with it
    finally:
        _stop(source, collector, stop)
