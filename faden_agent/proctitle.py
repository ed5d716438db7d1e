"""Readable process titles; /proc/PID/comm keeps 15 bytes, so it gets a short name of its own."""

from __future__ import annotations

import setproctitle


def set_title(long_title: str, short_name: str) -> None:
    setproctitle.setproctitle(long_title)
    setproctitle.setthreadtitle(short_name[:15])
