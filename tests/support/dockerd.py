"""The shared Docker engine as a process tests can stop, continue and restart for real.
Only tests marked `serial` use these: every other test relies on the same engine."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil

from tests.support.agentproc import wait_for

DOCKERD_LOG = os.environ.get("FADEN_TEST_SERVICES_DIR", "/var/tmp/faden-test-services") + "/dockerd.log"


def serves_the_default_socket(cmdline: list[str]) -> bool:
    """True for the shared engine (started without -H, so on /var/run/docker.sock); engines of
    their own that the cluster rig or a benchmark start at the same time name their socket."""
    return not any(arg in ("-H", "--host") or arg.startswith(("-H=", "--host=")) for arg in cmdline[1:])


def dockerd_pid() -> int:
    pids = [
        p.pid
        for p in psutil.process_iter(["name", "cmdline"])
        if p.info["name"] == "dockerd" and serves_the_default_socket(p.info["cmdline"] or [])
    ]
    assert len(pids) == 1, f"expected one dockerd on the default socket, found {pids}"
    return pids[0]


def engine_answers() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


def sigstop_dockerd() -> int:
    pid = dockerd_pid()
    os.kill(pid, signal.SIGSTOP)
    return pid


def sigcont_dockerd(pid: int | None = None) -> None:
    os.kill(pid or dockerd_pid(), signal.SIGCONT)


def restart_dockerd(down_s: float = 0.0, timeout_s: float = 60.0) -> None:
    """SIGTERM the engine, wait for it to exit, start a new one (as tests/infra/start-services.sh does)."""
    pid = dockerd_pid()
    os.kill(pid, signal.SIGCONT)
    os.kill(pid, signal.SIGTERM)
    wait_for(
        lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE,
        timeout_s,
        interval_s=0.2,
        what="dockerd to exit",
    )
    time.sleep(down_s)
    os.makedirs(os.path.dirname(DOCKERD_LOG), exist_ok=True)
    with open(DOCKERD_LOG, "ab") as log:
        subprocess.Popen(
            ["dockerd"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    wait_for(engine_answers, timeout_s, interval_s=0.5, what="dockerd to answer again")
