"""The supervisor with real processes and real signals."""

from __future__ import annotations

import itertools
import os
import re
import signal
import socket
import subprocess
import sys
import time

from tests.support.agentproc import AgentProcess, agent_env, pid_alive, wait_for
from tests.support.sampleworkers import supervisor_argv

STEADY = "tests.support.sampleworkers:SteadyWorker"
CRASHER = "tests.support.sampleworkers:CrashAtStartWorker"
STUBBORN = "tests.support.sampleworkers:IgnoresSigtermWorker"
WORKER_NAMES = ("stream", "executor", "inventory", "logs")


def steady_agent(tmp_path, names=WORKER_NAMES, extra=None, **env_overrides) -> AgentProcess:
    """A real supervisor whose workers are minimal ones (no backend, Docker or journal needed)."""
    workers = {name: STEADY for name in names}
    workers.update(extra or {})
    env = agent_env(tmp_path, **env_overrides)
    return AgentProcess(env, tmp_path / "agent.log", argv=supervisor_argv(workers))


def child_pids(pid: int) -> set[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def test_kill_9_of_each_worker_restarts_only_that_worker(tmp_path):
    with steady_agent(tmp_path) as agent:
        for name in WORKER_NAMES:
            before = agent.wait_all_running()
            victim = before[name]["pid"]
            os.kill(victim, signal.SIGKILL)
            after = wait_for(
                lambda name=name, victim=victim: (
                    (rows := agent.workers())
                    and rows[name]["state"] == "RUNNING"
                    and rows[name]["pid"] != victim
                    and rows
                ),
                timeout_s=10,
                what=f"{name} to come back",
            )
            assert after[name]["restarts"] == before[name]["restarts"] + 1
            assert after[name]["last_exit"] == "signal SIGKILL"
            for other in WORKER_NAMES:
                if other != name:
                    assert after[other]["pid"] == before[other]["pid"], f"{other} was disturbed by the kill of {name}"


def test_sigstopped_worker_is_detected_dumped_and_replaced(tmp_path):
    with steady_agent(tmp_path, WORKER_HANG_TIMEOUT_SEC="1.5") as agent:
        victim = agent.workers()["inventory"]["pid"]
        os.kill(victim, signal.SIGSTOP)
        stopped_at = time.monotonic()
        rows = wait_for(
            lambda: (
                (r := agent.workers())
                and r["inventory"]["pid"] not in (None, victim)
                and r["inventory"]["state"] == "RUNNING"
                and r
            ),
            timeout_s=10,
            what="the hung worker to be replaced",
        )
        replaced_after = time.monotonic() - stopped_at
        assert not pid_alive(victim)
        assert rows["inventory"]["last_exit"].startswith("killed: hung")
        assert rows["inventory"]["exit_cause"] == "hung"
        # documented bound: hang timeout + 0.5 s dump grace + restart backoff + one heartbeat
        assert replaced_after < 1.5 + 0.5 + 2 + 3
        log = agent.log_text()
        assert "sent no liveness message" in log
        assert "most recent call first" in log, "faulthandler traceback of the hung worker was not dumped"


def test_crash_loop_backoff_grows_and_fatal_leaves_others_running(tmp_path):
    agent = steady_agent(
        tmp_path,
        names=("stream", "executor"),
        extra={"broken": CRASHER},
        RESTART_BACKOFF_MIN_SEC="0.2",
        RESTART_MAX="4",
        RESTART_WINDOW_SEC="60",
        FATAL_RETRY_SEC="600",
    )
    agent.start(wait_running=False)
    try:
        seen = set()

        def fatal():
            rows = agent.workers()
            if rows:
                seen.add(rows["broken"]["state"])
                return rows["broken"]["state"] == "FATAL" and rows
            return None

        rows = wait_for(fatal, timeout_s=20, interval_s=0.02, what="the broken worker to go FATAL")
        assert "BACKOFF" in seen
        assert rows["broken"]["restarts"] == 4
        assert rows["broken"]["pid"] is None
        assert rows["broken"]["last_exit"] == "exit 70"
        delays = [
            float(d)
            for d in re.findall(r"worker broken exited \(exit 70\); restarting in ([0-9.]+)s", agent.log_text())
        ]
        assert len(delays) == 4
        # exponential: each delay about twice the previous one (jitter is +-20 %)
        for earlier, later in itertools.pairwise(delays):
            assert later > earlier * 1.2, delays
        stable = agent.workers()
        time.sleep(1)
        again = agent.workers()
        for name in ("stream", "executor"):
            assert again[name]["state"] == "RUNNING"
            assert again[name]["pid"] == stable[name]["pid"]
        assert "worker broken FATAL" in agent.log_text()
    finally:
        agent.stop()
        agent.kill()


def test_fatal_worker_is_retried_later(tmp_path):
    agent = steady_agent(
        tmp_path,
        names=("stream",),
        extra={"broken": CRASHER},
        RESTART_BACKOFF_MIN_SEC="0.1",
        RESTART_MAX="1",
        RESTART_WINDOW_SEC="60",
        FATAL_RETRY_SEC="1",
    )
    agent.start(wait_running=False)
    try:
        wait_for(lambda: "retrying FATAL worker broken" in agent.log_text(), timeout_s=15, what="a FATAL retry")
    finally:
        agent.stop()
        agent.kill()


def test_kill_9_of_supervisor_leaves_no_worker(tmp_path):
    agent = steady_agent(tmp_path)
    agent.start()
    try:
        pids = [w["pid"] for w in agent.workers().values()]
        assert all(pid_alive(p) for p in pids)
        os.kill(agent.pid, signal.SIGKILL)
        agent.proc.wait(5)
        wait_for(lambda: not any(pid_alive(p) for p in pids), timeout_s=5, what="workers to die with the supervisor")
    finally:
        agent.kill()


def test_sigterm_stops_everything_with_exit_0(tmp_path):
    agent = steady_agent(tmp_path, STOP_TIMEOUT_SEC="5")
    agent.start()
    pids = [w["pid"] for w in agent.workers().values()]
    started = time.monotonic()
    code = agent.stop(signal.SIGTERM, timeout_s=10)
    took = time.monotonic() - started
    assert code == 0
    assert took < 5 + 1  # the documented bound: STOP_TIMEOUT_SEC, then SIGKILL
    assert not any(pid_alive(p) for p in pids)
    assert "supervisor stopped" in agent.log_text()
    assert not (tmp_path / "run" / "control.sock").exists()


def test_stubborn_worker_is_killed_at_the_stop_bound(tmp_path):
    agent = steady_agent(tmp_path, names=("stream",), extra={"stubborn": STUBBORN}, STOP_TIMEOUT_SEC="2")
    agent.start()
    stubborn = agent.workers()["stubborn"]["pid"]
    started = time.monotonic()
    assert agent.stop(signal.SIGTERM, timeout_s=10) == 0
    took = time.monotonic() - started
    assert 2 <= took < 4, took
    assert not pid_alive(stubborn)
    assert "did not stop in time: SIGKILL" in agent.log_text()


def test_second_signal_shortens_the_wait(tmp_path):
    agent = steady_agent(tmp_path, names=("stream",), extra={"stubborn": STUBBORN}, STOP_TIMEOUT_SEC="60")
    agent.start()
    started = time.monotonic()
    agent.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    agent.proc.send_signal(signal.SIGINT)
    assert agent.proc.wait(10) == 0
    assert time.monotonic() - started < 5


def test_process_titles_tell_supervisor_and_workers_apart(tmp_path):
    with steady_agent(tmp_path) as agent:
        rows = agent.workers()
        titles = {}
        for name, row in rows.items():
            with open(f"/proc/{row['pid']}/cmdline", "rb") as fh:
                titles[name] = fh.read().replace(b"\0", b" ").decode().strip()
            with open(f"/proc/{row['pid']}/comm") as fh:
                assert fh.read().strip() == f"faden-{name}"[:15]
            assert titles[name] == f"faden-agent: worker {name}"
        with open(f"/proc/{agent.pid}/comm") as fh:
            assert fh.read().strip() == "faden-super"


def test_runtime_dir_is_private_and_other_users_cannot_connect(tmp_path):
    with steady_agent(tmp_path) as agent:
        runtime = tmp_path / "run"
        assert (runtime.stat().st_mode & 0o777) == 0o700
        sockets = sorted(runtime.glob("*.sock"))
        assert {s.name for s in sockets} >= {"control.sock", "liveness.sock"}
        os.chmod(tmp_path, 0o755)  # let "nobody" reach the runtime dir's parent: only the 0700 dir stops it
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: become nobody, then try every endpoint
            os.close(read_fd)
            try:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                results = []
                for path in sockets:
                    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                        try:
                            sock.connect(str(path))
                            results.append(f"{path.name}:connected")
                        except PermissionError:
                            results.append(f"{path.name}:denied")
                        except OSError as exc:
                            results.append(f"{path.name}:{exc.errno}")
                os.write(write_fd, ",".join(results).encode())
            finally:
                os._exit(0)
        os.close(write_fd)
        os.waitpid(pid, 0)
        results = os.read(read_fd, 65536).decode().split(",")
        assert results and all(r.endswith(":denied") for r in results), results
        # and the owner can: the same endpoint answers us
        assert agent.ps()["workers"]


def test_ps_cli_json_and_exit_codes(tmp_path):
    agent = steady_agent(tmp_path, names=("stream",), extra={"broken": CRASHER}, RESTART_MAX="50")
    env = agent.env
    cli = [sys.executable, "-m", "faden_agent", "ps"]
    none = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=10)
    assert none.returncode == 3
    assert "no supervisor answers" in none.stderr
    agent.start(wait_running=False)
    try:
        wait_for(lambda: agent.workers().get("stream", {}).get("state") == "RUNNING", what="stream RUNNING")
        started = time.monotonic()
        out = subprocess.run(cli + ["--json"], env=env, capture_output=True, text=True, timeout=10)
        assert time.monotonic() - started < 5
        import orjson

        table = orjson.loads(out.stdout)
        names = {w["name"] for w in table["workers"]}
        assert names == {"stream", "broken"}
        for row in table["workers"]:
            assert {"name", "state", "pid", "restarts", "uptime_s", "alive_age_s"} <= row.keys()
            assert row["heartbeat_age_s"] == row["alive_age_s"]  # the old name, for one release
        assert out.returncode == 1  # "broken" is not RUNNING
        text = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=10)
        assert text.returncode == 1
        assert re.search(r"^stream\s+RUNNING\s+\d+", text.stdout, re.M), text.stdout
        assert re.search(r"^WORKER\s+STATE\s+PID\s+UPTIME\s+RESTARTS\s+LAST EXIT\s+ALIVE\s", text.stdout, re.M)
    finally:
        agent.stop()
        agent.kill()


def test_ps_exit_0_when_all_running(tmp_path):
    with steady_agent(tmp_path) as agent:
        out = subprocess.run(
            [sys.executable, "-m", "faden_agent", "ps"], env=agent.env, capture_output=True, text=True, timeout=10
        )
        assert out.returncode == 0, out.stderr
        for name in WORKER_NAMES:
            assert re.search(rf"^{name}\s+RUNNING", out.stdout, re.M)
