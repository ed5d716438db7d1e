"""Whether NVIDIA's persistence daemon runs: a process whose name (`/proc/<pid>/comm`, the
kernel's first 15 bytes of it) is nvidia-persistenced's."""

from __future__ import annotations

import os

COMM = "nvidia-persistenced"[:15]  # the kernel keeps 15 bytes of a process name


def daemon_running(proc: str = "/proc") -> bool:
    for pid in os.listdir(proc):
        if not pid.isdigit():
            continue
        try:
            with open(f"{proc}/{pid}/comm", "rb") as fh:
                if fh.read(64).rstrip(b"\n").decode("utf-8", "replace") == COMM:
                    return True
        except OSError:  # gone meanwhile
            continue
    return False
