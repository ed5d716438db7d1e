"""The systemd notify protocol against a real AF_UNIX datagram socket, as systemd listens.

The last test runs a real supervisor (one idle worker) with NOTIFY_SOCKET/WATCHDOG_USEC set
and reads what it sends: READY once the worker runs, WATCHDOG while its loop turns,
STOPPING on SIGTERM.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from faden_agent.supervisor.notify import SystemdNotifier
from tests.support.agentproc import agent_env, wait_for
from tests.support.ports import free_port


@pytest.fixture
def listener(tmp_path: Path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = tmp_path / "notify.sock"
    sock.bind(str(path))
    sock.settimeout(5)
    yield sock, str(path)
    sock.close()


def receive(sock: socket.socket) -> list[str]:
    return sock.recv(4096).decode().split("\n")


def test_ready_watchdog_stopping_status_reach_the_socket(listener):
    sock, path = listener
    notifier = SystemdNotifier({"NOTIFY_SOCKET": path})
    assert notifier.enabled
    assert notifier.ready("4 workers running")
    assert receive(sock) == ["READY=1", "STATUS=4 workers running"]
    assert notifier.watchdog()
    assert receive(sock) == ["WATCHDOG=1"]
    assert notifier.stopping()
    assert receive(sock) == ["STOPPING=1"]
    assert notifier.status("stream reconnecting")
    assert receive(sock) == ["STATUS=stream reconnecting"]


def test_abstract_namespace_address():
    name = f"faden-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        assert SystemdNotifier({"NOTIFY_SOCKET": "@" + name}).ready()
        assert receive(sock) == ["READY=1"]


def test_outside_systemd_everything_is_a_no_op():
    notifier = SystemdNotifier({})
    assert not notifier.enabled
    assert not notifier.ready() and not notifier.watchdog() and not notifier.stopping()
    assert notifier.watchdog_interval_s is None


def test_a_vanished_socket_does_not_raise(tmp_path):
    assert SystemdNotifier({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")}).ready() is False


def test_watchdog_interval_is_half_the_period_and_only_for_our_pid():
    mine = {"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "20000000", "WATCHDOG_PID": str(os.getpid())}
    assert SystemdNotifier(mine).watchdog_interval_s == 10.0
    assert SystemdNotifier({**mine, "WATCHDOG_PID": ""}).watchdog_interval_s == 10.0
    other = {**mine, "WATCHDOG_PID": str(os.getppid())}
    assert SystemdNotifier(other).watchdog_interval_s is None
    assert SystemdNotifier({**mine, "WATCHDOG_USEC": "0"}).watchdog_interval_s is None
    assert SystemdNotifier({**mine, "WATCHDOG_USEC": "soon"}).watchdog_interval_s is None


SUPERVISOR = textwrap.dedent(
    """
    import sys
    from faden_agent.config import load_config
    from faden_agent.supervisor import Supervisor
    workers = {"idle": "faden_agent.workers.base:Worker", **EXTRA}
    sys.exit(Supervisor(load_config(), workers=workers, on_demand={n: lambda: False for n in DORMANT}).run())
    """
)


def supervisor_code(extra: dict[str, str] | None = None, dormant: tuple[str, ...] = ()) -> str:
    """A real supervisor of an idle worker and `extra`; `dormant` ones start only on demand."""
    return SUPERVISOR.replace("EXTRA", repr(extra or {})).replace("DORMANT", repr(dormant))


def ready_message(sock: socket.socket, env: dict[str, str], code: str) -> list[str]:
    """The message that carries READY=1 from a supervisor run with `code`, then killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        message = receive(sock)
        while "READY=1" not in message:
            message = receive(sock)
        return message
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def start_supervisor(env: dict[str, str]) -> subprocess.Popen:
    """A real supervisor of one idle worker, in a session of its own."""
    return subprocess.Popen(
        [sys.executable, "-c", supervisor_code()],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_real_supervisor_sends_ready_watchdog_and_stopping(listener, tmp_path):
    sock, path = listener
    env = agent_env(tmp_path)
    env.update(NOTIFY_SOCKET=path, WATCHDOG_USEC="400000")  # pet every 0.2 s
    proc = start_supervisor(env)
    try:
        seen: list[list[str]] = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and sum(m == ["WATCHDOG=1"] for m in seen) < 3:
            seen.append(receive(sock))
        ready = [m for m in seen if "READY=1" in m]
        assert len(ready) == 1, seen
        assert "STATUS=1 workers running" in ready[0]
        assert sum(m == ["WATCHDOG=1"] for m in seen) >= 3, seen
        proc.send_signal(signal.SIGTERM)
        while True:
            message = receive(sock)
            if message != ["WATCHDOG=1"]:
                break
        assert message == ["STOPPING=1"]
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_only_the_supervisor_keeps_the_notify_socket(listener, tmp_path):
    """NotifyAccess=main: the workers (and what they start) never inherit NOTIFY_SOCKET or
    the watchdog's variables, while the supervisor still notifies."""
    sock, path = listener
    dump = tmp_path / "seen.env"
    # First in the environment block, as systemd may put it: unsetting it must not cost the titles.
    env = {"NOTIFY_SOCKET": path, **agent_env(tmp_path), "WATCHDOG_USEC": "400000", "FADEN_TEST_ENV_DUMP": str(dump)}
    proc = subprocess.Popen(
        [sys.executable, "-c", supervisor_code({"env": "tests.support.sampleworkers:EnvironmentWorker"})],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while "READY=1" not in receive(sock):
            pass
        names = {line.split("=", 1)[0] for line in wait_for(dump.exists) and dump.read_text().splitlines()}
        assert not names & {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"}, names
        assert "FADEN_NODE_AGENT_RUNTIME_DIR" in names  # the rest is inherited
        assert receive(sock) == ["WATCHDOG=1"]  # the supervisor itself still speaks
        assert Path(f"/proc/{proc.pid}/cmdline").read_text().startswith("faden-agent: supervisor")  # its title
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_ready_is_sent_while_one_worker_crash_loops(listener, tmp_path):
    """systemd must not restart the whole agent because one worker cannot start."""
    sock, path = listener
    env = agent_env(tmp_path, restart_max=100)
    env.update(NOTIFY_SOCKET=path)
    message = ready_message(sock, env, supervisor_code({"broken": "tests.support.sampleworkers:CrashAtStartWorker"}))
    assert any(m.startswith("STATUS=1 workers running; not running: broken") for m in message), message


def test_ready_is_sent_while_a_worker_waits_for_demand(listener, tmp_path):
    """A worker started on demand (the peer worker) and not wanted yet is as it
    should be: READY comes, STATUS names it as on demand."""
    sock, path = listener
    env = agent_env(tmp_path)
    env.update(NOTIFY_SOCKET=path)
    message = ready_message(sock, env, supervisor_code({"later": "faden_agent.workers.base:Worker"}, ("later",)))
    assert "STATUS=1 workers running; on demand: later" in message, message


class Scraper(threading.Thread):
    """GET /metrics back to back; keeps the idle worker's samples of the latest scrape."""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.port, self.scrapes, self.stop = port, 0, threading.Event()
        self.idle: dict[tuple[str, str], float] = {}

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/metrics")
                body = conn.getresponse().read().decode()
                conn.close()
            except OSError:
                time.sleep(0.05)
                continue
            self.idle = {
                (sample.name, sample.labels.get("state", "")): sample.value
                for family in text_string_to_metric_families(body)
                for sample in family.samples
                if sample.labels.get("worker") == "idle"
            }
            self.scrapes += 1


def test_scrapes_back_to_back_never_hold_up_the_watchdog_or_a_restart(listener, tmp_path):
    """A wake-up for the metrics endpoint alone is served without the loop's other steps;
    what is due (the watchdog, a worker's restart) still happens while scrapes never stop."""
    sock, path = listener
    port = free_port()
    env = agent_env(tmp_path)
    env.update(NOTIFY_SOCKET=path, WATCHDOG_USEC="400000", FADEN_NODE_AGENT_METRICS_ADDR=f"127.0.0.1:{port}")
    proc = start_supervisor(env)
    scraper = Scraper(port)
    try:
        while "READY=1" not in receive(sock):
            pass
        scraper.start()
        wait_for(lambda: scraper.idle.get(("faden_agent_worker_state", "RUNNING")) == 1.0, what="a scrape")
        started, scrapes = time.monotonic(), scraper.scrapes
        sock.settimeout(5)
        pets = [receive(sock) for _ in range(4)]  # one every 0.2 s is due
        assert pets == [["WATCHDOG=1"]] * 4 and scraper.scrapes - scrapes > 4, (pets, scraper.scrapes - scrapes)
        assert time.monotonic() - started < 3
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        os.kill(int(children[0]), signal.SIGKILL)
        wait_for(lambda: scraper.idle.get(("faden_agent_worker_restarts_total", "")) == 1.0, what="the restart")
        wait_for(lambda: scraper.idle.get(("faden_agent_worker_state", "RUNNING")) == 1.0, what="RUNNING again")
    finally:
        scraper.stop.set()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
