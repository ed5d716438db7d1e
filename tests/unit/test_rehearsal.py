"""The supervisor rehearses the workers' first HTTP, Docker and SQLite calls before it forks
(issue 16: the pages those first calls write are then written once, in the supervisor,
instead of copied into every worker). It touches nothing outside the process, leaves no
thread, socket file or folder behind, and a step that cannot run is skipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys

CHILD = """
import json, os, tempfile, threading
from faden_agent.supervisor.rehearsal import rehearse
done = rehearse()
left = [n for n in os.listdir(tempfile.gettempdir()) if n.startswith("faden-rehearsal-")]
print(json.dumps({"done": done, "threads": threading.active_count(), "left": left}))
"""


def run_child(env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_every_step_runs_and_nothing_is_left_behind(tmp_path):
    result = run_child(dict(os.environ, TMPDIR=str(tmp_path)))
    assert result["done"] == {"http": 24, "docker": 48, "sqlite": 36}
    assert result["threads"] == 1  # the servers' threads were joined before the fork that follows
    assert result["left"] == [] and list(tmp_path.iterdir()) == []


def test_a_step_that_cannot_run_is_skipped_and_the_others_still_run(tmp_path):
    # A temporary folder whose path is too long for a Unix socket (108 bytes): the Docker
    # rehearsal cannot bind its engine socket.
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    result = run_child(dict(os.environ, TMPDIR=str(deep)))
    assert result["done"] == {"http": 24, "docker": 0, "sqlite": 36}
    assert result["threads"] == 1 and result["left"] == [] and list(deep.iterdir()) == []
