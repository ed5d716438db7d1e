"""An outside program run bounded: its time limit or a stop ends its whole process group (a child
it left running too, one that ignores SIGTERM after the grace), its output is capped, a program
that is not there is a reason; a group left by an earlier run is ended only while it is the same."""

from __future__ import annotations

import signal
import subprocess
import threading
import time

from faden_agent.common import programs
from tests.support.agentproc import pid_alive, wait_for


def pids_of(path) -> list[int]:
    wait_for(lambda: path.exists() and len(path.read_text().split()) == 2, 10, what="the pids written")
    return [int(p) for p in path.read_text().split()]


def test_the_time_limit_ends_the_program_and_what_it_started(tmp_path):
    pids = tmp_path / "pids"
    script = f"sleep 600 & echo $$ $! > {pids}; echo started; wait"
    started = time.monotonic()
    ran = programs.run(["sh", "-c", script], 1.0)
    took = time.monotonic() - started
    assert (ran.exit_code, ran.ended, ran.output) == (None, "time_limit", "started\n")
    assert not ran.ok and 1.0 <= took < 1.0 + programs.TERM_GRACE_S
    assert not any(pid_alive(p) for p in pids_of(pids))


def test_a_group_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    pids = tmp_path / "pids"
    script = f"trap '' TERM; sh -c \"trap '' TERM; sleep 600\" & echo $$ $! > {pids}; wait; wait"
    started = time.monotonic()
    ran = programs.run(["sh", "-c", script], 0.5)
    assert ran.ended == "time_limit"
    assert time.monotonic() - started >= 0.5 + programs.TERM_GRACE_S - 0.1
    assert not any(pid_alive(p) for p in pids_of(pids))


def test_a_stop_ends_it_and_a_finished_one_leaves_no_member(tmp_path):
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    ran = programs.run(["sleep", "600"], 60, stop)
    assert ran.ended == "stopped"
    pids = tmp_path / "pids"
    # the leader ends, a member it left (not holding the output) is ended with the group
    ran = programs.run(["sh", "-c", f"sleep 600 >/dev/null 2>&1 & echo $$ $! > {pids}; echo done"], 10)
    assert (ran.exit_code, ran.ended, ran.output) == (0, None, "done\n") and ran.ok
    assert not any(pid_alive(p) for p in pids_of(pids))


def test_output_is_capped_and_a_missing_program_is_its_reason(tmp_path):
    ran = programs.run(["sh", "-c", f"head -c {programs.MAX_OUTPUT * 3} /dev/zero | tr '\\0' x"], 30)
    assert ran.exit_code == 0 and len(ran.output) == programs.MAX_OUTPUT
    missing = programs.run([str(tmp_path / "nvidia-smi")], 5)
    assert missing.exit_code is None and "No such file or directory" in missing.error
    assert not missing.ok
    said = programs.Ran(("x",), 1, "a\n\n  b  \n" + "c" * 700, 0.1).words(50)
    assert said.startswith("a b ccc") and len(said) == 50


def test_a_left_group_is_ended_only_while_it_is_the_same_process():
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        started = programs.start_time(proc.pid)
        assert started is not None
        assert not programs.end_leftover(proc.pid, started + 1)  # another process by now: left alone
        assert pid_alive(proc.pid)
        assert programs.end_leftover(proc.pid, started)
        proc.wait(5)
        assert proc.returncode == -signal.SIGKILL
        assert not programs.end_leftover(proc.pid, started)  # gone
        assert not programs.end_leftover(1, None)  # init's group: never
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
