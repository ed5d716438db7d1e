"""Readable process titles; /proc/PID/comm keeps 15 bytes, so it gets a short name of its own.
Variables leave the environment through unset_environ, which keeps the title's room."""

from __future__ import annotations

import os

import setproctitle


def set_title(long_title: str, short_name: str) -> None:
    setproctitle.setproctitle(long_title)
    setproctitle.setthreadtitle(short_name[:15])


def unset_environ(*names: str) -> list[str]:
    """Takes the variables out of the environment (children never inherit them); the names
    that were set. setproctitle measures the room it may overwrite (argv and the environment
    block after it) from `environ` at its first use: once the first variable is unset, it
    finds none and titles stay the command line. So it measures first."""
    setproctitle.getproctitle()
    return [name for name in names if os.environ.pop(name, None) is not None]
