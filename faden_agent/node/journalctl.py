"""journalctl's command line as the agent's readers of this node's journal run it: the
journal directory setting, where to start (after a cursor, else since a time, else the first
entry the filters match), and setpriv's parent-death signal so no journalctl outlives the
worker that reads it."""

from __future__ import annotations

from pathlib import Path

from faden_agent.common.parentdeath import dies_with_parent


def journalctl_argv(options: list[str], directory: Path | None, cursor: str | None, since: float | None) -> list[str]:
    argv = ["journalctl", *options]
    if directory is not None:
        argv.append(f"--directory={directory}")
    if cursor:
        argv.append(f"--after-cursor={cursor}")
    elif since is not None:
        argv.append(f"--since=@{int(since)}")
    return dies_with_parent(argv)
