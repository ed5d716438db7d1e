"""Faults that tests make on demand, where no real part can make them at the right moment.

A hook is read from FADEN_TEST_HOOK_<NAME> and honoured only when FADEN_TEST_HOOKS=1 is
set as well (the test helpers set both; a service's environment file never does).
"""

from __future__ import annotations

import os


def hook(name: str) -> str | None:
    if os.environ.get("FADEN_TEST_HOOKS") != "1":
        return None
    return os.environ.get(f"FADEN_TEST_HOOK_{name.upper()}") or None


def kill_between(first: str, second: str) -> None:
    """KILL_BETWEEN=first/second: SIGKILL this process between those two writes (after a
    moment, so replies already on their way leave first)."""
    if hook("kill_between") == f"{first}/{second}":
        import signal
        import time

        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)


def thread_dies_after(worker: str, thread: str) -> float | None:
    """THREAD_DIES=worker/thread[/seconds]: that thread raises after the delay (default 0)."""
    value = hook("thread_dies")
    if not value:
        return None
    parts = value.split("/")
    if parts[:2] != [worker, thread]:
        return None
    return float(parts[2]) if len(parts) > 2 else 0.0


def kill_once_between(first: str, second: str, marker_dir: os.PathLike) -> None:
    """kill_between, once per marker directory (the restarted process goes on)."""
    if hook("kill_between") == f"{first}/{second}":
        marker = os.path.join(marker_dir, f"killed-{first}-{second}")
        if not os.path.exists(marker):
            open(marker, "w").close()
            kill_between(first, second)


def pause(point: str, marker_dir: os.PathLike) -> None:
    """PAUSE=point/seconds: at that point, leave a marker file `paused-<point>` in
    marker_dir, then sleep (the test acts in that window, knowing where this process is)."""
    value = hook("pause")
    if value and value.startswith(f"{point}/"):
        import time

        open(os.path.join(marker_dir, f"paused-{point}"), "w").close()
        time.sleep(float(value.split("/", 1)[1]))
