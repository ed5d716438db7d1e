"""The systemd watchdog is fed only while the agent is useful (docs/service.md):
a required worker that stays FATAL stops the feeding; an optional one does not. A real
supervisor talks to a real AF_UNIX datagram socket, as systemd listens."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import pytest

from tests.support.agentproc import agent_env
from tests.support.sampleworkers import supervisor_argv

STEADY = "tests.support.sampleworkers:SteadyWorker"
CRASHER = "tests.support.sampleworkers:CrashAtStartWorker"


@pytest.fixture
def notify_socket(tmp_path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify.sock"))
    sock.settimeout(0.5)
    yield sock
    sock.close()


def supervise(tmp_path, sock, workers):
    env = agent_env(tmp_path, restart_max=1, restart_window_sec=60, fatal_retry_sec=1)
    env.update(NOTIFY_SOCKET=sock.getsockname(), WATCHDOG_USEC="400000")  # fed every 0.2 s
    return subprocess.Popen(
        supervisor_argv(workers), env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def messages_for(sock, seconds: float) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            seen.extend(sock.recv(4096).decode().split("\n"))
        except TimeoutError:
            pass
    return seen


def first_feed(sock, timeout_s: float = 30.0) -> list[str]:
    """What the supervisor sent up to its first WATCHDOG=1 (kept by the socket however slowly
    a loaded machine starts the supervisor)."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while "WATCHDOG=1" not in seen and time.monotonic() < deadline:
        seen += messages_for(sock, 0.2)
    return seen


def stop(proc):
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_a_required_worker_that_stays_fatal_stops_the_watchdog(tmp_path, notify_socket):
    proc = supervise(tmp_path, notify_socket, {"stream": STEADY, "executor": CRASHER})
    try:
        seen = first_feed(notify_socket)
        assert "WATCHDOG=1" in seen  # fed while the executor is only crash-looping / FATAL once
        deadline = time.monotonic() + 30
        while not any("watchdog withheld: required worker executor stays FATAL" in m for m in seen):
            assert time.monotonic() < deadline, seen
            seen = messages_for(notify_socket, 0.5)
        after = messages_for(notify_socket, 2.0)
        assert "WATCHDOG=1" not in after, after
    finally:
        stop(proc)


def test_an_optional_worker_that_stays_fatal_keeps_the_watchdog_fed(tmp_path, notify_socket):
    proc = supervise(tmp_path, notify_socket, {"stream": STEADY, "executor": STEADY, "logs": CRASHER})
    try:
        seen = messages_for(notify_socket, 8.0)  # several FATAL retries of logs at 1 s each
        later = messages_for(notify_socket, 2.0)
        assert "WATCHDOG=1" in later and not any("withheld" in m for m in seen + later), seen + later
    finally:
        stop(proc)
