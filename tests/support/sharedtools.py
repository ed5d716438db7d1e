"""Where the real third-party builds for tests live (Loki, Docker Engine 29): a folder
named by an environment variable, else ../shared/tools/<name> beside this repository, else
beside the main checkout of this git worktree, else beside the local checkout this one was
cloned from (a clone into a temporary folder, as CI makes one)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def find_shared_tool(name: str, env_var: str) -> Path:
    if os.environ.get(env_var):
        return Path(os.environ[env_var])
    beside = REPO.parent / "shared" / "tools" / name
    if beside.exists():
        return beside
    main_git = git("rev-parse", "--path-format=absolute", "--git-common-dir")  # <main>/.git
    origin = git("remote", "get-url", "origin")
    for checkout in (Path(main_git).parent if main_git else None, Path(origin) if origin else None):
        if checkout is not None and checkout.is_dir():
            found = checkout.resolve().parent / "shared" / "tools" / name
            if found.exists():
                return found
    return beside


def git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
