"""Where the service's files live, for a system service (root) or a user service."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from faden_agent.service.standalone import launcher_path

UNIT_NAME = "faden-agent.service"


@dataclass(frozen=True)
class ServicePaths:
    scope: str  # "system" or "user"
    unit_path: Path
    env_path: Path

    @classmethod
    def for_current_user(cls) -> ServicePaths:
        if os.geteuid() == 0:
            return cls("system", Path("/etc/systemd/system") / UNIT_NAME, Path("/etc/faden-agent/agent.env"))
        config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        return cls("user", config_home / "systemd/user" / UNIT_NAME, config_home / "faden-agent/agent.env")

    @property
    def systemctl(self) -> list[str]:
        return ["systemctl", "--user"] if self.scope == "user" else ["systemctl"]

    @property
    def wanted_by(self) -> str:
        return "default.target" if self.scope == "user" else "multi-user.target"


def agent_command() -> list[str]:
    """How systemd should start this very agent: the standalone binary, or this Python."""
    if getattr(sys, "frozen", False):
        # The launcher file, not the build it unpacked into its cache (faden_agent/service/standalone.py).
        return [os.path.realpath(launcher_path() or sys.executable)]
    # Not realpath: a virtual environment's python is a symlink to the system's, and only
    # through the link does the interpreter find the environment (and faden_agent in it).
    return [os.path.abspath(sys.executable), "-m", "faden_agent"]
