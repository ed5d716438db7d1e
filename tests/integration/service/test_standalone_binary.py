"""The standalone binary's launcher (packaging/launcher.sh, faden_agent/service/standalone.py), run for
real: unpacked once per build into a private cache, concurrent first starts, killed
launchers, pruning of older builds, and the agent running as the launched process itself."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from faden_agent import __version__
from faden_agent.devbackend.builds import build_version
from tests.support.agentproc import AgentProcess, agent_env, wait_for
from tests.support.systemdctr import REPO, agent_build


@pytest.fixture(scope="module")
def binary() -> Path:
    return agent_build()


def launch(binary: Path, cache: Path, *args: str, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    env = env or {**os.environ, "FADEN_AGENT_UNPACK_DIR": str(cache)}
    return subprocess.run([str(binary), *args], env=env, capture_output=True, text=True, timeout=120, **kwargs)


def builds_in(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir())


def test_the_build_says_its_version_in_its_header(binary):
    assert build_version(binary) == __version__


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def locked_versions(lock: Path) -> dict[str, str]:
    """name -> version of a pip-compile lock file."""
    pins = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^ \\]+)", lock.read_text(), re.M)
    return {normalized(name): version for name, version in pins}


def test_the_binary_bundles_exactly_the_lock_files_versions(binary, tmp_path):
    """The release is built from packaging/requirements.lock: every package the lock pins is
    in the binary at that version (build.sh copies each one's metadata), nothing else is."""
    cache = tmp_path / "cache"
    assert launch(binary, cache, "--version").returncode == 0
    (build,) = builds_in(cache)
    bundled = {}
    for info in (cache / build).rglob("*.dist-info"):
        metadata = (info / "METADATA").read_text(errors="replace")
        name = re.search(r"^Name: (.+)$", metadata, re.M).group(1).strip()
        bundled[normalized(name)] = re.search(r"^Version: (.+)$", metadata, re.M).group(1).strip()
    locked = locked_versions(REPO / "packaging/requirements.lock")
    assert {"docker", "requests", "pyzmq", "nvidia-ml-py", "py-spy"} <= set(locked)
    assert bundled == locked
    py_spy = cache / build / "_internal" / "py-spy"  # the binary of py-spy's wheel, where the agent looks
    done = subprocess.run([str(py_spy), "--version"], capture_output=True, text=True, timeout=30)
    assert done.stdout.strip() == f"py-spy {locked['py-spy']}", done.stderr


def test_first_start_unpacks_once_into_a_private_cache_later_starts_reuse_it(binary, tmp_path):
    cache = tmp_path / "cache"
    assert launch(binary, cache, "--version").stdout.strip() == f"faden-agent {__version__}"
    (build,) = builds_in(cache)
    assert build.endswith(f"-{__version__}")
    assert (cache.stat().st_mode & 0o777) == 0o700
    inode = (cache / build).stat().st_ino
    assert launch(binary, cache, "--version").returncode == 0
    assert builds_in(cache) == [build] and (cache / build).stat().st_ino == inode  # not unpacked again


def test_concurrent_first_starts_all_run_and_leave_one_build(binary, tmp_path):
    cache = tmp_path / "cache"
    env = {**os.environ, "FADEN_AGENT_UNPACK_DIR": str(cache)}
    procs = [
        subprocess.Popen([str(binary), "--version"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outs
    assert all(out.strip() == f"faden-agent {__version__}" for out, _ in outs)
    (build,) = builds_in(cache)  # no second copy, no .unpack.* left
    assert not [p for p in (cache / build).iterdir() if p.name.startswith(".unpack.")]


def start_unpacking(binary: Path, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "FADEN_AGENT_UNPACK_DIR": str(cache)}
    proc = subprocess.Popen(
        [str(binary), "--version"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    wait_for(
        lambda: cache.is_dir() and any(p.name.startswith(".unpack.") for p in cache.iterdir()),
        30,
        interval_s=0.005,
        what="the launcher to start unpacking",
    )
    return proc


def test_a_launcher_stopped_while_unpacking_removes_its_half(binary, tmp_path):
    cache = tmp_path / "cache"
    proc = start_unpacking(binary, cache)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) != 0
    assert builds_in(cache) == []


def test_what_a_killed_launcher_left_goes_with_the_next_start(binary, tmp_path):
    cache = tmp_path / "cache"
    proc = start_unpacking(binary, cache)
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its tail | tar
    proc.wait(timeout=10)
    (half,) = builds_in(cache)
    assert half.startswith(".unpack.")
    assert launch(binary, cache, "--version").returncode == 0
    (build,) = builds_in(cache)
    assert build.endswith(f"-{__version__}")


def test_an_older_build_goes_only_once_no_process_runs_it(binary, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    old = cache / "0123456789abcdef-0.0.1"
    (old / "_internal").mkdir(parents=True)
    (old / "faden-agent").write_text("#!/bin/sh\n")
    running = os.open(old, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(running, fcntl.LOCK_SH)  # what an agent of that build holds while it runs
    try:
        assert launch(binary, cache, "--version").returncode == 0
        assert old.is_dir() and len(builds_in(cache)) == 2
    finally:
        os.close(running)
    assert launch(binary, cache, "--version").returncode == 0
    assert old.is_dir() and len(builds_in(cache)) == 2  # placed under a minute ago: it may be starting
    aged = {**os.environ, "FADEN_TEST_HOOKS": "1", "FADEN_TEST_HOOK_PLACED_GRACE_S": "0"}  # as if a minute on
    assert launch(binary, cache, "--version", env={**aged, "FADEN_AGENT_UNPACK_DIR": str(cache)}).returncode == 0
    assert not old.exists() and len(builds_in(cache)) == 1


def test_the_agent_is_the_launched_process_and_holds_its_build(binary, tmp_path):
    cache = tmp_path / "cache"
    env = {**agent_env(tmp_path, backend_url="http://127.0.0.1:9"), "FADEN_AGENT_UNPACK_DIR": str(cache)}
    with AgentProcess(env, tmp_path / "agent.log", argv=[str(binary), "run"]) as agent:
        agent.wait_all_running()
        supervisor = psutil.Process(agent.pid)  # the launcher exec'd: no process between
        (build,) = builds_in(cache)
        assert supervisor.exe().startswith(str(cache / build) + "/")
        done = subprocess.run([str(binary), "ps"], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        held = os.open(cache / build, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(held)


def test_a_cache_another_user_could_write_is_refused(binary, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    os.chmod(cache, 0o777)
    done = launch(binary, cache, "--version")
    assert done.returncode == 1 and "writable by other users" in done.stderr
    if os.geteuid() == 0:
        os.chmod(cache, 0o700)
        os.chown(cache, 65534, 65534)
        done = launch(binary, cache, "--version")
        assert done.returncode == 1 and "belongs to another user" in done.stderr
