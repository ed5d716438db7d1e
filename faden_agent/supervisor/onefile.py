"""The standalone binary's process layout: PyInstaller's onefile bootloader starts Python as
its child. systemd sees the bootloader as the main process; the bootloader forwards signals
(stop, watchdog abort) to the supervisor and removes its unpacked files when it exits.
The one gap: a bootloader killed with SIGKILL cannot forward anything, so the supervisor
asks the kernel for SIGTERM when its parent dies and stops in order (its workers follow).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def is_onefile_child() -> bool:
    """True in the Python process that PyInstaller's onefile bootloader started."""
    if not getattr(sys, "frozen", False):
        return False
    try:
        return os.readlink(f"/proc/{os.getppid()}/exe") == os.readlink("/proc/self/exe")
    except OSError:
        return False


def follow_bootloader() -> bool:
    """Under the bootloader, get SIGTERM when it dies; returns whether that applies here."""
    if not is_onefile_child():
        return False
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # it died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)
    return True
