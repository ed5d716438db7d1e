"""Run a Python script that loads the tests' C NVML in a child process (a process that loaded
libnvidia-ml.so.1 keeps that one): run_child(script, *args) -> its stdout, or an assertion
error with its stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_child(script: str, *args: str, timeout_s: float = 120) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
