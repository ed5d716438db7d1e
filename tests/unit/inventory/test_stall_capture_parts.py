"""The parts of a capture at their worst: py-spy stand-ins that hang, flood, fail natively or
stop their target (killed at the deadline, the target resumed); py-spy's error words read
into reasons; a document cut to the byte cap in order, its summary whole; the spool refusing
symlinks, FIFOs, oversize files and more than its bound; the executor's question checked."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from faden_agent.node import captures
from faden_agent.workers.inventory.capture import document, pyspy
from faden_agent.workers.inventory.capture.capturer import Capturer
from faden_agent.workers.inventory.capture.stacks import busiest, frame_text, namespace_tids, thread_ticks
from faden_agent.workers.inventory.capture.triggers import Triggers

DENIED = """Error: Failed to get process executable name. Check that the process is running.

Caused by:
    0: Permission denied (os error 13)
    1: Permission denied (os error 13)

Stack backtrace:
   0: <E as anyhow::context::ext::StdError>::ext_context
"""
THREADS = [{"thread_name": "MainThread", "os_thread_id": 1, "frames": [{"name": "f", "short_filename": "a.py"}]}]


def stand_in(tmp_path: Path, monkeypatch, script: str) -> Path:
    """A py-spy that runs `script` (sh; $3 is the pid) in place of the real one."""
    path = tmp_path / "py-spy"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    monkeypatch.setattr(pyspy, "binary", lambda: str(path))
    return path


def test_py_spy_s_words_become_reasons():
    with pytest.raises(pyspy.DumpFailed) as denied:
        pyspy._parse(1, b"", DENIED.encode())
    assert denied.value.reason == "cannot_attach"
    assert str(denied.value) == (
        "py-spy: Error: Failed to get process executable name. Check that the process is running."
        " (Permission denied (os error 13))"
    )
    with pytest.raises(pyspy.DumpFailed) as not_python:
        pyspy._parse(1, b"", b"Error: Failed to find python version from target process\n")
    assert not_python.value.reason == "not_python"
    with pytest.raises(pyspy.DumpFailed) as garbage:
        pyspy._parse(0, b"\x00not json", b"")
    assert garbage.value.reason == "failed"
    assert pyspy._parse(0, orjson.dumps(THREADS + ["junk"]), b"") == THREADS


def test_a_hanging_py_spy_is_killed_at_the_deadline_and_its_target_resumed(tmp_path, monkeypatch):
    target = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"])
    try:
        stand_in(tmp_path, monkeypatch, 'kill -STOP "$3"; exec sleep 60\n')  # attaches, then hangs
        started = time.monotonic()
        with pytest.raises(pyspy.DumpFailed) as hung:
            pyspy.dump(target.pid, 1.0)
        assert hung.value.reason == "timeout" and time.monotonic() - started < 5
        time.sleep(0.2)
        with open(f"/proc/{target.pid}/stat") as fh:
            state = fh.read().rpartition(")")[2].split()[0]
        assert state in ("R", "S"), state  # running again: never left stopped
    finally:
        target.kill()
        target.wait()


def test_a_flooding_py_spy_is_cut_off(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, 'exec yes \'[{"thread_name": "x"}]\'\n')
    with pytest.raises(pyspy.DumpFailed) as flood:
        pyspy.dump(os.getpid(), 20.0)
    assert flood.value.reason == "too_large"


def test_native_frames_where_it_unwinds_python_frames_where_not(tmp_path, monkeypatch):
    body = orjson.dumps(THREADS).decode()
    stand_in(
        tmp_path,
        monkeypatch,
        'case "$*" in *--native*) echo "Error: Failed to get stack traces" >&2;'
        ' printf "\\nCaused by:\\n    0: UNW_EBADREG: bad register number\\n" >&2; exit 1;; esac\n'
        f"echo '{body}'\n",
    )
    (thread,) = pyspy.dump(os.getpid(), 10.0)
    assert thread["native_error"] == "py-spy: Error: Failed to get stack traces (UNW_EBADREG: bad register number)"
    stand_in(tmp_path, monkeypatch, "echo 'Error: Permission denied (os error 13)' >&2; exit 1\n")
    with pytest.raises(pyspy.DumpFailed) as denied:  # no second try without --native: it would fail alike
        pyspy.dump(os.getpid(), 10.0)
    assert denied.value.reason == "cannot_attach"


HOLDER = """
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
if len(sys.argv) > 3:
    libc.prctl(15, sys.argv[3].encode(), 0, 0, 0)  # PR_SET_NAME: the name it chose
if libc.ptrace(0x4206, int(sys.argv[1]), None, None) != 0:  # PTRACE_SEIZE: traced, not stopped
    sys.exit(f"seize failed: errno {ctypes.get_errno()}")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


@pytest.fixture
def sleeper():
    target = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"])
    yield target
    target.kill()
    target.wait()


def hold(pid: int, seconds: float, *name: str) -> subprocess.Popen:
    """A second tracer (ptrace's seize, as a debugger or another py-spy holds it) on `pid`."""
    argv = [sys.executable, "-c", HOLDER, str(pid), str(seconds), *name]
    holder = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def test_a_target_another_tracer_holds_is_dumped_once_it_lets_go(sleeper):
    holder = hold(sleeper.pid, 1.0)
    assert pyspy.tracer(sleeper.pid) == holder.pid
    started = time.monotonic()
    (thread,) = pyspy.dump(sleeper.pid, 8.0)
    assert time.monotonic() - started >= 0.5  # it waited for the holder
    assert "<module> (<string>:2)" in [frame_text(frame) for frame in thread["frames"]], thread
    holder.wait(5)
    assert pyspy.tracer(sleeper.pid) is None


def test_a_tracer_holding_past_the_deadline_is_named(sleeper):
    holder = hold(sleeper.pid, 30.0)
    try:
        started = time.monotonic()
        with pytest.raises(pyspy.DumpFailed) as held:
            pyspy.dump(sleeper.pid, 1.5)
        assert held.value.reason == "cannot_attach" and time.monotonic() - started < 3
        assert "Failed to suspend process" in str(held.value)
        named = f"; pid {holder.pid} ({Path(sys.executable).name[:15]}) traces it"  # its comm
        assert str(held.value).endswith(named), str(held.value)
    finally:
        holder.kill()
        holder.wait()


def test_a_tracer_s_name_is_one_printable_line(sleeper):
    holder = hold(sleeper.pid, 30.0, "evil\nname\x1b[2J")
    try:
        with pytest.raises(pyspy.DumpFailed) as held:
            pyspy.dump(sleeper.pid, 1.0)
        assert str(held.value).endswith(f"; pid {holder.pid} (evil?name?[2J) traces it"), str(held.value)
    finally:
        holder.kill()
        holder.wait()


def test_refused_at_attaching_with_no_tracer_it_tries_once_more_only(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    stand_in(
        tmp_path,
        monkeypatch,
        f'echo run >> {runs}; echo "Error: Failed to get stack traces" >&2;'
        ' printf "\\nCaused by:\\n    0: Failed to suspend process\\n    1: EPERM: Operation not permitted\\n" >&2;'
        " exit 1\n",
    )
    with pytest.raises(pyspy.DumpFailed) as refused:
        pyspy.dump(os.getpid(), 10.0, native=False)
    assert refused.value.reason == "cannot_attach" and "traces it" not in str(refused.value)
    assert (
        str(refused.value)
        == "py-spy: Error: Failed to get stack traces (Failed to suspend process; EPERM: Operation not permitted)"
    )
    assert runs.read_text().count("run") == 2


def test_threads_of_this_process_map_and_the_busiest_is_the_one_with_cpu():
    ticks = thread_ticks(os.getpid())
    assert os.getpid() in ticks
    assert namespace_tids(os.getpid(), list(ticks))[os.getpid()] == os.getpid()  # no namespace: the same
    idle = {"name": "idle", "cpu_s": 0.0, "gil": True, "active": True, "frames": ["sleep (a.py:1)"]}
    spinning = {"name": "engine", "cpu_s": 0.3, "gil": False, "active": True, "frames": ["spin (b.py:2)"]}
    found = busiest([{"pid": 7, "comm": "python3", "threads": [idle, spinning]}])
    assert found == {"pid": 7, "comm": "python3", "thread": "engine", "frames": ["spin (b.py:2)"]}
    assert busiest([]) is None


def big_document() -> dict:
    threads = [
        {
            "name": f"t{n}",
            "tid": n,
            "cpu_s": 0.0,
            "active": False,
            "gil": False,
            "frames": [f"f{n}_{i} (x.py:{i})" * 3 for i in range(40)],
        }
        for n in range(60)
    ]
    threads[7]["cpu_s"] = 1.0
    stacks = {
        "status": "ok",
        "reason": None,
        "processes": [
            {"pid": 100, "comm": "python3", "status": "ok", "threads": threads},
            {"pid": 101, "comm": "python3", "status": "ok", "threads": [dict(t, name="other") for t in threads[:5]]},
        ],
        "busiest": {"pid": 100, "comm": "python3", "thread": "t7", "frames": threads[7]["frames"]},
    }
    gpus = [
        {"index": i, "uuid": f"GPU-{i}", "verdict": "ok", "processes": [{"pid": p} for p in range(32)]}
        for i in range(8)
    ]
    return {
        "capture_id": "cap-0123456789abcdef",
        "trigger": "workload.stalled",
        "container": {"id": "c" * 64, "name": "engine", "cluster": "c1", "workload": "w"},
        "stacks": stacks,
        "gpus": gpus,
        "logs": {"lines": [f"line {n} " + "x" * 900 for n in range(100)], "error": None},
    }


@pytest.mark.parametrize("cap", [8192, 16384, 49152])
def test_a_document_is_cut_to_the_cap_least_telling_first(cap):
    doc = big_document()
    brief = document.summary(doc)
    line = document.fit(doc, cap)
    assert len(line) <= cap
    kept = orjson.loads(line)
    assert kept["cut"]["from_bytes"] > cap and kept["cut"]["parts"][0] == "older_log_lines"
    assert kept["capture_id"] == brief["id"] and kept["stacks"]["busiest"]["thread"] == "t7"
    assert kept["stacks"]["busiest"]["frames"][0] == brief["top_frames"][0]
    assert brief["top_frames"] == big_document()["stacks"]["busiest"]["frames"][:5]  # the summary is whole
    assert [g["verdict"] for g in kept["gpus"]] == ["ok"] * 8
    small = {**big_document(), "stacks": {"status": "ok", "busiest": None}, "gpus": [], "logs": {"lines": []}}
    assert "cut" not in orjson.loads(document.fit(small, cap))


def test_the_spool_takes_regular_files_only_and_no_more_than_its_bound(tmp_path):
    ids = [captures.capture_id(f"wl:{n}") for n in range(captures.MAX_WAITING + 1)]
    for capture in ids[:-1]:
        captures.keep(tmp_path, capture, b'{"a": 1}')
    with pytest.raises(captures.NotKept, match="already wait"):
        captures.keep(tmp_path, ids[-1], b"{}")
    assert captures.waiting(tmp_path) == ids[:-1]
    assert captures.read(tmp_path, ids[0]) == b'{"a": 1}'
    with pytest.raises(captures.NotKept, match="not a capture"):
        captures.keep(tmp_path, "../../etc/passwd", b"{}")
    for capture in ids:
        captures.remove(tmp_path, capture)
    directory = captures.directory(tmp_path)
    (directory / (ids[0] + ".json")).symlink_to("/etc/hostname")
    os.mkfifo(directory / (ids[1] + ".json"))
    (directory / (ids[2] + ".json")).write_bytes(b"x" * (captures.MAX_FILE_BYTES + 1))
    with pytest.raises(OSError):
        captures.read(tmp_path, ids[0])  # a symlink is never followed
    with pytest.raises(ValueError, match="not a regular file"):
        captures.read(tmp_path, ids[1])  # a FIFO: refused at once, never waited on
    with pytest.raises(ValueError, match="over"):
        captures.read(tmp_path, ids[2])
    for n in range(captures.MAX_TAKEN + 10):
        captures.note_taken(tmp_path, captures.capture_id(str(n)))
    taken = captures.taken(tmp_path)
    assert len(taken) == captures.MAX_TAKEN and taken[-1] == captures.capture_id(str(captures.MAX_TAKEN + 9))


def test_the_executors_question_is_checked_and_one_death_is_captured_once(tmp_path):
    started = []
    capturer = Capturer(
        tmp_path, 49152, 300.0, None, lambda: None, lambda: {}, lambda *args, **kw: started.append(args)
    )
    triggers = Triggers(capturer)
    assert triggers.died("junk")["id"] is None
    assert "record_id" in triggers.died({"container_id": "c", "time": time.time()})["reason"]
    assert triggers.died({"record_id": "r", "container_id": "c", "time": True})["id"] is None
    old = triggers.died({"record_id": "ev:c:die:1", "container_id": "c", "time": time.time() - 3600})
    assert old["id"] is None and "over 60 s old" in old["reason"]  # a replay: its GPUs then are gone
    question = {"record_id": "ev:c:die:2", "container_id": "c", "name": "n", "time": time.time(), "gpus": "x" * 9}
    first = triggers.died(question)
    assert first["id"] == captures.capture_id("ev:c:die:2") and first["stacks"] == "no_process"
    assert len(started) == 1  # the capture thread, once
    again = triggers.died(question)  # the same death asked about again (a replay)
    assert again["id"] == first["id"] and len(started) == 1


def test_the_workers_import_none_of_it_until_a_capture():
    code = (
        "import sys\n"
        "import faden_agent.workers.inventory.worker, faden_agent.workers.logs.worker\n"
        "import faden_agent.workers.executor.worker\n"
        "print(sorted(m for m in sys.modules if '.inventory.capture' in m or m.endswith('.gpu.gpm')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
