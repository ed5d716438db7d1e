"""The warm-up before the fork (prefork/warmup.py): the workers' first Docker calls run through
the agent's own client against a private answerer, so the interpreter has rewritten their
bytecode before any worker exists; it leaves no thread, socket or folder behind, a warm-up
that cannot run is skipped, and a local client cannot hold or grow the answerer."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faden_agent.supervisor.prefork import warmup
from tests.support.peerclose import closed_by_peer

REPO = Path(__file__).resolve().parents[3]
CHILD = """
import dis, json, os, tempfile, threading
from faden_agent.engine.versions import Negotiation
from faden_agent.http.client import HttpClient
from faden_agent.supervisor.prefork.warmup import warm_up
# a request's path, and a client's negotiation (run once a round: rewritten from the second on)
HOT = [HttpClient.request, Negotiation.negotiate]
def rewritten():
    return [
        sum(a.opname != b.opname for a, b in zip(dis.get_instructions(f.__code__, adaptive=True),
                                                 dis.get_instructions(f.__code__)))
        for f in HOT
    ]
before = rewritten()
done = warm_up()
print(json.dumps({"done": done, "before": before, "after": rewritten(), "threads": threading.active_count(),
                  "left": os.listdir(tempfile.gettempdir())}))
"""


def run_child(tmpdir: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": tmpdir}
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.skipif(sys.version_info < (3, 12), reason="dis shows the rewritten bytecode from 3.12 on")
def test_the_calls_run_before_the_fork_and_leave_nothing(tmp_path):
    result = run_child(str(tmp_path))
    assert result["done"] is True
    # the request's and the client's bytecode was rewritten (specialized) here, before any fork
    assert all(after > before + 10 for before, after in zip(result["before"], result["after"], strict=True)), result
    assert result["threads"] == 1 and result["left"] == []


def test_a_warm_up_that_cannot_run_is_skipped(tmp_path):
    long_dir = tmp_path / ("d" * 120)  # a socket path over AF_UNIX's 108 bytes: bind fails
    long_dir.mkdir()
    too_long = run_child(str(long_dir))
    assert too_long["done"] is False and too_long["threads"] == 1 and too_long["left"] == []


@pytest.mark.parametrize(
    ("head", "status", "body"),
    [
        (b"GET /_ping HTTP/1.1\r\nHost: x", b"200 OK", b"OK"),
        (b"GET /version HTTP/1.1", b"200 OK", warmup.VERSION),
        (b"GET /v1.44/containers/json?all=1 HTTP/1.1", b"200 OK", b"[]"),
        (b"POST /v1.44/containers/create HTTP/1.1", b"404 Not Found", b"{}"),
        (b"\x00garbage", b"404 Not Found", b"{}"),
    ],
)
def test_answers(head, status, body):
    reply = warmup.answer(head)
    assert reply.startswith(b"HTTP/1.1 " + status + b"\r\n")
    assert reply.endswith(b"\r\n\r\n" + body) and f"Content-Length: {len(body)}".encode() in reply


def test_a_silent_or_endless_client_neither_holds_nor_grows_the_answerer(tmp_path):
    path = str(tmp_path / "engine.sock")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(path)
        listener.listen(8)
        answerer = warmup.Answerer(listener)
        with answerer:
            silent = socket.socket(socket.AF_UNIX)
            silent.connect(path)  # says nothing
            endless = socket.socket(socket.AF_UNIX)
            endless.connect(path)
            endless.settimeout(5)
            sent = 0
            try:
                while sent < 4 * warmup.MAX_HEAD_BYTES:  # a head with no end
                    sent += endless.send(b"x" * 4096)
            except OSError:
                pass  # the answerer closed it
            assert closed_by_peer(endless, 5), "a head over MAX_HEAD_BYTES ends the connection unanswered"
            polite = socket.socket(socket.AF_UNIX)
            polite.connect(path)
            polite.sendall(b"GET /_ping HTTP/1.1\r\n\r\n")
            polite.settimeout(5)
            assert polite.recv(4096).endswith(b"\r\n\r\nOK")
            started = time.monotonic()
        assert not answerer.thread.is_alive() and time.monotonic() - started < 1.0
        for conn in (silent, endless, polite):
            assert closed_by_peer(conn, 5)  # every connection ended with the answerer
            conn.close()


def test_a_client_that_reads_no_answer_cannot_hold_the_answerer(tmp_path):
    path = str(tmp_path / "engine.sock")
    asked = 20_000  # 1.4 MB of answers, never read while it sends
    with socket.socket(socket.AF_UNIX) as listener, socket.socket(socket.AF_UNIX) as greedy:
        listener.bind(path)
        listener.listen(8)
        answerer = warmup.Answerer(listener)
        with answerer:
            greedy.connect(path)
            greedy.settimeout(10)
            with contextlib.suppress(OSError):  # the answerer may end it first
                greedy.sendall(b"GET /_ping HTTP/1.1\r\n\r\n" * asked)
        assert not answerer.thread.is_alive()  # its send gave up after TIMEOUT_S
        received = 0
        greedy.settimeout(5)  # a connection still open fails the test here (TimeoutError)
        with contextlib.suppress(ConnectionResetError):
            while chunk := greedy.recv(1 << 16):
                received += len(chunk)
        assert received < asked * len(warmup.answer(b"GET /_ping HTTP/1.1"))
