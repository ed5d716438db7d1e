"""`faden-agent admin send ... --follow` / `admin command ID --follow` against the
real reference backend and a real agent pulling from the test registry: a pull's bar reaches
100 % and the view ends with `succeeded`; a failed pull ends with its reason and message.
The CLI runs in a pseudo-terminal (the live bars a person sees) and into a pipe (plain lines)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest

from tests.support.backendproc import agent_on_backend, backend  # noqa: F401
from tests.support.executorproc import big_image  # noqa: F401

pytestmark = pytest.mark.docker

COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # within a line: dropped
CURSOR = re.compile(r"\x1b\[[0-9;?]*[A-Za-ln-z]|\x1b\][^\x07]*\x07|\r")  # moves between redraws: a line break


def _env(backend) -> dict[str, str]:
    return {
        "FADEN_ADMIN_TOKEN": backend.admin_token,
        "PATH": "/usr/bin:/bin",
        "TERM": "xterm",
        "COLUMNS": "160",
        "LINES": "40",
    }


def admin_in_terminal(backend, *args: str, timeout_s: float = 180) -> tuple[int, str]:
    """Run `faden-agent admin ARGS` with a pseudo-terminal as stdout/stderr; (exit code, screen text)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "faden_agent", "admin", *args, "--url", backend.url],
        env=_env(backend),
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.5)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(leader)
    try:
        code = proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(
            f"`admin {' '.join(args)}` did not end in {timeout_s}s:\n{b''.join(chunks)[-3000:]!r}"
        ) from None
    return code, CURSOR.sub("\n", COLOUR.sub("", b"".join(chunks).decode(errors="replace")))


def admin_piped(backend, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "faden_agent", "admin", *args, "--url", backend.url],
        env=_env(backend),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_follow_a_pull_from_the_registry(backend, agent_on_backend, big_image):
    agent, node = agent_on_backend()
    code, screen = admin_in_terminal(
        backend, "send", node["node_id"], "image.pull", "--spec", json.dumps({"image": big_image}), "--follow"
    )
    assert code == 0, screen[-3000:]
    lines = [line.strip() for line in screen.splitlines() if line.strip()]
    command_id = lines[0]
    document = backend.command(command_id)
    assert document["state"] == "succeeded", document
    total = [r for r in document["timeline"] if r["state"] == "progress"][-1]["bytes_total"]
    assert total >= 4 * 128 * 1024 * 1024
    bars = [line for line in lines if line.startswith(f"pull {big_image}")]
    assert bars and "100%" in bars[-1], bars[-3:]  # the bar reached 100 %
    assert f"{total / 1e6:.1f} MB / {total / 1e6:.1f} MB" in bars[-1], bars[-1]
    for state in ("received", "started", "succeeded"):
        assert any(re.match(rf"\d\d:\d\d:\d\d +[+-][\d.]+s +{state} ", line) for line in lines), (state, lines[-8:])
    assert re.search(r"succeeded +ok: pulled ", lines[-1]), lines[-3:]

    # Afterwards, into a pipe: one plain line per progress record, each with its rate.
    piped = admin_piped(backend, "command", command_id, "--follow")
    assert piped.returncode == 0, piped.stderr
    progress = [line for line in piped.stdout.splitlines() if " progress " in line]
    assert len(progress) >= 2 and "100.0 %" in progress[-1], progress[-3:]
    assert any(re.search(r"\d+(\.\d+)? [kMG]B/s", line) for line in progress), progress
    # --json keeps the document (the view goes to stderr).
    as_json = admin_piped(backend, "command", command_id, "--follow", "--json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["id"] == command_id, as_json.stdout[-500:]
    assert "succeeded" in as_json.stderr


def test_follow_a_failed_pull_shows_reason_and_message(backend, agent_on_backend, registry):
    agent, node = agent_on_backend()
    image = f"{registry}/faden/busybox:no-such-tag"
    code, screen = admin_in_terminal(
        backend, "send", node["node_id"], "image.pull", "--spec", json.dumps({"image": image}), "--follow"
    )
    assert code == 1, screen[-3000:]
    last = [line.strip() for line in screen.splitlines() if line.strip()][-1]
    assert re.search(r"failed +image_not_found: pulling .*no such image or tag in registry", last), screen[-2000:]
    assert "manifest unknown" in screen, screen[-2000:]
