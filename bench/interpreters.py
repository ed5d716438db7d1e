"""Other CPythons on this machine, each with the agent installed in a virtual environment
of the bench's own (bench/.venvs/cpython-X.Y, made once, then reused), so one bench run can
measure the same agent on each (issue 16: CPython 3.12 and 3.13 have immortal objects,
which the supervisor uses before forking; 3.11 has none).

Found on PATH (python3.11 ... python3.13) and among pyenv's versions; a pyenv shim that
names a version not selected does not run and is skipped.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENVS = REPO / "bench" / ".venvs"
VERSIONS = ("3.11", "3.12", "3.13")
AGENT_IMPORTS = "import faden_agent, docker, orjson, psutil, requests, setproctitle, zmq"


def version_of(python: str) -> str | None:
    """ "3.12" for a CPython that runs, else None."""
    probe = "import sys; print(sys.implementation.name, '%d.%d' % sys.version_info[:2])"
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    name, _, version = done.stdout.strip().partition(" ")
    return version if done.returncode == 0 and name == "cpython" else None


def cpythons() -> dict[str, str]:
    """{"3.12": path} of each CPython version found (the bench's own interpreter included)."""
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = [sys.executable]
    for version in VERSIONS:
        candidates.append(shutil.which(f"python{version}") or "")
        candidates += sorted(glob.glob(f"{pyenv_root}/versions/{version}.*/bin/python{version}"))
    found: dict[str, str] = {}
    for path in filter(None, candidates):
        version = version_of(path)
        if version in VERSIONS and version not in found:
            found[version] = path
    return found


def with_agent(python: str) -> str:
    """An interpreter of `python`'s version that imports the agent from this checkout: the
    bench's own when it is that version, else a venv under bench/.venvs (made on first use:
    `pip install -e .`, about a minute)."""
    version = version_of(python)
    if version == version_of(sys.executable):
        return sys.executable
    venv = VENVS / f"cpython-{version}"
    venv_python = str(venv / "bin" / "python")
    if not Path(venv_python).exists():
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
    check = subprocess.run([venv_python, "-c", AGENT_IMPORTS], capture_output=True, cwd="/")
    if check.returncode != 0:
        subprocess.run([venv_python, "-m", "pip", "install", "-q", "-e", str(REPO)], check=True)
    return venv_python
