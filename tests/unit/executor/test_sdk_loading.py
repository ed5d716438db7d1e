"""The Docker SDK loads once, whole, under docker_ops.load_sdk's lock: commands on several
threads (a prune beside a pull) each import parts of it at their first run, and two threads
importing it at once meet its modules half made (ImportError "partially initialized module
'docker.types'", seen in CI; without the lock this script fails in 15 runs of 15)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCRIPT = """
import json, threading
from faden_agent.supervisor.prefork import preload
preload.skip_charset_guessers()
from faden_agent.workers.executor import docker_ops
IMPORTS = [
    "faden_agent.workers.executor.prune",
    "faden_agent.engine.sdk",
    "docker.types",
    "faden_agent.transfers.fetch",
    "faden_agent.workers.executor.pull_size",
    "docker.utils.json_stream",
]
barrier = threading.Barrier(12)
errors = []
def first_command(name):
    barrier.wait()
    try:
        docker_ops.load_sdk()
        __import__(name)
    except Exception as exc:
        errors.append(repr(exc)[:200])
threads = [threading.Thread(target=first_command, args=(IMPORTS[i % 6],)) for i in range(12)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps(errors))
"""


def test_commands_on_many_threads_load_the_sdk_whole():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for _ in range(3):  # a fresh interpreter each time: the SDK not loaded yet
        out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout.splitlines()[-1]) == []
