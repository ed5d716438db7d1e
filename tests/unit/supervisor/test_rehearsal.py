"""The supervisor rehearses the workers' first HTTP, Docker and SQLite calls before it forks
(the pages those first calls write are then written once, in the supervisor, instead of
copied into every worker). It touches nothing outside the process, leaves no
thread, socket file or folder behind, and a step that cannot run is skipped."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, os, tempfile, threading
from faden_agent.supervisor.prefork.rehearsal import rehearse
done = rehearse()
left = [n for n in os.listdir(tempfile.gettempdir()) if n.startswith("faden-rehearsal-")]
print(json.dumps({"done": done, "threads": threading.active_count(), "left": left}))
"""


def run_child(env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_every_step_runs_and_nothing_is_left_behind():
    # A short temporary folder: pytest's own (under xdist) leaves too few of a Unix socket
    # path's 108 bytes for the engine socket, which the next test shows being skipped.
    folder = Path(tempfile.mkdtemp(prefix="fr-", dir="/tmp"))
    try:
        result = run_child(dict(os.environ, TMPDIR=str(folder)))
        assert result["done"] == {"http": 24, "docker": 48, "sqlite": 36}
        assert result["threads"] == 1  # the servers' threads were joined before the fork that follows
        assert result["left"] == [] and list(folder.iterdir()) == []
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_step_that_cannot_run_is_skipped_and_the_others_still_run(tmp_path):
    # A temporary folder whose path is too long for a Unix socket (108 bytes): the Docker
    # rehearsal cannot bind its engine socket.
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    result = run_child(dict(os.environ, TMPDIR=str(deep)))
    assert result["done"] == {"http": 24, "docker": 0, "sqlite": 36}
    assert result["threads"] == 1 and result["left"] == [] and list(deep.iterdir()) == []


HOSTILE = """
import json, socket, threading
from faden_agent.supervisor.prefork import rehearsal

server = rehearsal._TcpServer(("127.0.0.1", 0), rehearsal._TcpAnswers)
thread = rehearsal._serve(server)
answers = []
for head in (b"Content-Length: 99999999999", b"Content-Length: -5", b"Content-Length: x", b"Content-Length: 2"):
    with socket.create_connection(server.server_address, timeout=5) as conn:
        conn.sendall(b"POST /x HTTP/1.1\\r\\nHost: h\\r\\n" + head + b"\\r\\n\\r\\n{}")
        answers.append(conn.recv(100).split(b"\\r\\n")[0].decode())
rehearsal._stop(server, thread)
print(json.dumps({"answers": answers, "threads": threading.active_count()}))
"""


def test_a_local_process_sending_nonsense_gets_no_answer_and_costs_nothing():
    # The loopback port is reachable by other local processes while the rehearsal runs.
    out = subprocess.run([sys.executable, "-c", HOSTILE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    result = json.loads(out.stdout)
    assert result["answers"] == ["", "", "", "HTTP/1.1 200 OK"]
    assert result["threads"] == 1
