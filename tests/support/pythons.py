"""The CPythons on this machine, by version (for tests and the bench that run the agent on
another interpreter than their own): found on PATH (python3.11 ... python3.13) and among
pyenv's versions; a pyenv shim of a version not selected does not run and is skipped."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

VERSIONS = ("3.11", "3.12", "3.13")


def version_of(python: str) -> str | None:
    """ "3.12" for a CPython that runs, else None."""
    probe = "import sys; print(sys.implementation.name, '%d.%d' % sys.version_info[:2])"
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):  # not runnable, or hangs: not a CPython to use
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
