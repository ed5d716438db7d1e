"""What the standalone binary's agent removes from its unpack cache (faden_agent/service/standalone.py),
with real locks and real processes; tests/integration/service/test_standalone_binary.py runs the binary."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time

from faden_agent.service.standalone import PLACED_GRACE_S, hold_and_prune


def fake_build(cache, name):
    build = cache / name
    (build / "_internal").mkdir(parents=True)
    (build / "faden-agent").write_text("#!/bin/sh\n")
    return build


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_prunes_unused_builds_and_dead_unpacks_and_nothing_else(tmp_path):
    cache = tmp_path / "cache"
    ours = fake_build(cache, "00000000000000aa-0.2.0")
    unused = fake_build(cache, "00000000000000bb-0.1.0")
    in_use = fake_build(cache, "00000000000000cc-0.1.1")
    not_ours = [cache / "data", cache / "00000000000000dd-0.1.0"]  # no faden-agent inside
    for path in not_ours:
        path.mkdir()
    lookalike = cache / "models"
    (lookalike / "faden-agent").parent.mkdir()
    (lookalike / "faden-agent").write_text("")
    dead_unpack = cache / f".unpack.{dead_pid()}.abc123"
    live_unpack = cache / f".unpack.{os.getppid()}.def456"  # a launcher still unpacking
    dead_unpack.mkdir()
    live_unpack.mkdir()

    held = os.open(in_use, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(held, fcntl.LOCK_SH)  # an agent of that build still runs
    try:
        fd = hold_and_prune(ours, now=time.time() + PLACED_GRACE_S + 1)  # the builds were placed a while ago
    finally:
        os.close(held)
    assert fd is not None
    try:
        left = sorted(p.name for p in cache.iterdir())
        assert left == sorted([ours.name, in_use.name, "data", "00000000000000dd-0.1.0", "models", live_unpack.name])
        assert not unused.exists() and not dead_unpack.exists()
        # The lock this process now holds keeps its own build from the next start's pruning.
        probe = os.open(ours, os.O_RDONLY | os.O_DIRECTORY)
        try:
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
                raise AssertionError("the build in use could be locked exclusively")
            except BlockingIOError:
                pass
        finally:
            os.close(probe)
    finally:
        os.close(fd)


def test_a_build_removed_before_it_was_held_says_so(tmp_path):
    assert hold_and_prune(tmp_path / "cache" / "00000000000000aa-0.2.0") is None


def test_a_build_placed_just_now_is_not_removed_even_unlocked(tmp_path):
    """Its launcher may have exec'd it a moment ago: PyInstaller's bootloader reads the build
    before the agent takes its lock, and removing it then failed that start."""
    cache = tmp_path / "cache"
    ours = fake_build(cache, "00000000000000aa-0.2.0")
    starting = fake_build(cache, "00000000000000bb-0.3.0")  # renamed into place just now, no lock yet
    fd = hold_and_prune(ours)
    os.close(fd)
    assert starting.exists()
    fd = hold_and_prune(ours, now=time.time() + PLACED_GRACE_S + 1)  # a minute on, still unlocked
    os.close(fd)
    assert not starting.exists() and ours.exists()
