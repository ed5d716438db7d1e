"""The NVIDIA fabric manager as the host shows it: its systemd unit's state (`systemctl show
nvidia-fabricmanager`) and its version (`<ExecStart's program> --version`) against the driver's.
`check()` returns a FabricManager; each program runs bounded in time and output, and one that
is missing, hangs or answers nonsense is a state with its reason, never an exception.
"""

from __future__ import annotations

import os
import re
import select
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

UNIT = "nvidia-fabricmanager"
TIMEOUT_S = 5.0
MAX_OUTPUT = 64 << 10
VERSION = re.compile(r"\b(\d{2,4}\.\d{1,4}(?:\.\d{1,4})?)\b")
PROPERTIES = ("LoadState", "ActiveState", "SubState", "ExecStart")


class FabricManager(NamedTuple):
    active: bool | None  # None: unknown (no systemctl, no answer)
    state: str  # "active (running)", "inactive (dead)", "not-found", or why it is unknown
    version: str | None
    driver_version: str | None

    @property
    def problem(self) -> str | None:
        """What keeps the fabric up from working, in one line; None when nothing does."""
        if self.active is None:
            return f"fabric manager state unknown: {self.state}"
        if not self.active:
            return f"fabric manager not running ({UNIT}: {self.state})"
        if self.version and self.driver_version and self.version != self.driver_version:
            return f"fabric manager {self.version} does not match the driver {self.driver_version}"
        return None


def check(systemctl: str, driver_version: str | None) -> FabricManager:
    """The unit's state by `systemctl` (a program name or path), its version by its program."""
    shown, error = _run([systemctl, "show", UNIT, "--no-pager", *(f"--property={p}" for p in PROPERTIES)])
    if shown is None:
        return FabricManager(None, f"{systemctl}: {error}", None, driver_version)
    values = dict(line.partition("=")[::2] for line in shown.splitlines() if "=" in line)
    if values.get("LoadState") == "not-found":
        return FabricManager(False, "not-found (no such unit)", None, driver_version)
    active = values.get("ActiveState")
    if not active:
        return FabricManager(None, f"{systemctl} show answered no ActiveState", None, driver_version)
    state = f"{active} ({values.get('SubState') or '?'})"[:80]
    return FabricManager(active == "active", state, _version(values.get("ExecStart", "")), driver_version)


def _version(exec_start: str) -> str | None:
    """The version its program prints ("Fabric Manager version is : 550.54.15")."""
    program = re.search(r"path=(\S+)", exec_start)
    if program is None or not Path(program.group(1)).is_absolute():
        return None
    printed, _ = _run([program.group(1), "--version"])
    found = VERSION.search(printed or "")
    return found.group(1) if found else None


def _run(argv: list[str]) -> tuple[str | None, str]:
    """(its output, at most MAX_OUTPUT bytes, "") or (None, why not); killed at TIMEOUT_S."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except FileNotFoundError:
        return None, "not found"
    except OSError as exc:
        return None, exc.strerror or str(exc)
    assert proc.stdout is not None  # PIPE
    deadline = time.monotonic() + TIMEOUT_S
    output = b""
    try:
        while len(output) < MAX_OUTPUT:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
                return None, f"no answer within {TIMEOUT_S:g} s"
            chunk = os.read(proc.stdout.fileno(), MAX_OUTPUT - len(output))
            if not chunk:
                break
            output += chunk
        status = 0 if len(output) >= MAX_OUTPUT else proc.wait(max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return None, f"no answer within {TIMEOUT_S:g} s"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    if status != 0 and not output:
        return None, f"exited with {status}"
    return output.decode(errors="replace"), ""
