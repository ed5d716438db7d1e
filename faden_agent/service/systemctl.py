"""systemctl, called for one scope (system or --user); errors become ServiceError."""

from __future__ import annotations

import shutil
import subprocess

from faden_agent.service.paths import UNIT_NAME, ServicePaths

SHOW_PROPERTIES = (
    "LoadState",
    "ActiveState",
    "SubState",
    "UnitFileState",
    "MainPID",
    "NRestarts",
    "ExecMainStartTimestamp",
    "Result",
)


class ServiceError(RuntimeError):
    """A service action failed; str() is the one-line message for the operator."""


def systemctl(
    paths: ServicePaths, *args: str, check: bool = True, timeout_s: float = 120
) -> subprocess.CompletedProcess:
    if shutil.which("systemctl") is None:
        raise ServiceError(
            "systemctl not found: this machine does not run systemd; use `faden-agent run` under your own supervisor"
        )
    command = [*paths.systemctl, *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ServiceError(f"`{' '.join(command)}` did not finish within {timeout_s:g}s") from None
    if check and done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        hint = ""
        if paths.scope == "user" and "bus" in (done.stderr or "").lower():
            hint = " (no user service manager: log in with a session, or `loginctl enable-linger`)"
        raise ServiceError(f"`{' '.join(command)}` failed: {detail[-1] if detail else f'exit {done.returncode}'}{hint}")
    return done


def show(paths: ServicePaths) -> dict[str, str]:
    """The unit's state as systemctl sees it; {} when systemd cannot be asked."""
    try:
        done = systemctl(paths, "show", UNIT_NAME, "--property=" + ",".join(SHOW_PROPERTIES), check=False, timeout_s=10)
    except ServiceError:
        return {}
    if done.returncode != 0:
        return {}
    values = {}
    for line in done.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key] = value
    return values
