"""Other CPythons on this machine, each with the agent installed in a virtual environment
of the bench's own (bench/.venvs/cpython-X.Y, made once, then reused), so one bench run can
measure the same agent on each (issue 16: CPython 3.12 and 3.13 have immortal objects,
which the supervisor uses before forking; 3.11 has none).

The interpreters are found by tests/support/pythons.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.pythons import cpythons, version_of  # noqa: F401 - cpythons: the bench's entry
from tests.support.serviceenv import as_service as env_as_service

REPO = Path(__file__).resolve().parents[1]
VENVS = REPO / "bench" / ".venvs"
AGENT_IMPORTS = "import faden_agent, docker, orjson, psutil, requests, setproctitle, zmq"
# The cache root the benches' agents get for the unit's %C (their bytecode at the unit's
# optimization level, compiled once, then reused: an installed agent compiles it at its first start).
SERVICE_CACHE = VENVS / "service-cache"
# What compile_agent leaves out of the interpreter's own library: no agent imports these.
NOT_IMPORTED = r"/(test|tests|idlelib|tkinter|turtledemo|lib2to3|ensurepip|pydoc_data)/"


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


def compile_agent(python: str, source: Path = REPO) -> None:
    """Bytecode for the agent's modules under `source`, as an installed agent has them (pip
    compiles at install), and at the service's optimization level in the benches' cache: where
    PYTHONDONTWRITEBYTECODE is set, every start would otherwise compile the sources, which costs
    CPU and leaves garbage in every process's heap."""
    subprocess.run([python, "-m", "compileall", "-q", str(source / "faden_agent")], check=True)
    # and at the service's level, where the service's interpreter looks (the unit's settings)
    paths = subprocess.run(
        [python, "-c", "import sysconfig; print(*{sysconfig.get_path(p) for p in ('stdlib', 'purelib', 'platlib')})"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    subprocess.run(
        [python, "-m", "compileall", "-q", "-x", NOT_IMPORTED, *paths, str(source / "faden_agent")],
        env=as_service(dict(os.environ)),
        stdout=subprocess.DEVNULL,  # compileall names each library file it cannot compile
        check=False,  # a file of the interpreter's own that does not compile is not the agent's
    )


def as_service(env: dict[str, str]) -> dict[str, str]:
    """`env` with the Python settings the systemd unit gives the agent (tests/support/serviceenv.py)."""
    return env_as_service(env, SERVICE_CACHE)
