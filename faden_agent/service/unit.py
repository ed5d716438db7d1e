"""Render the unit template: deploy/systemd/faden-agent.service, linked beside this module as package data."""

from __future__ import annotations

import shlex
from pathlib import Path

from faden_agent.service.paths import ServicePaths

TEMPLATE = Path(__file__).with_name("faden-agent.service")
SYSTEM_ONLY = "#@system@ "


def _quote(word: str) -> str:
    # systemd splits ExecStart= like a shell; "%" starts a specifier, so it is doubled.
    return shlex.quote(word).replace("%", "%%")


def render_unit(paths: ServicePaths, command: list[str], template: str | None = None) -> str:
    text = TEMPLATE.read_text() if template is None else template
    lines = []
    for line in text.splitlines():
        if line.startswith(SYSTEM_ONLY):
            if paths.scope != "system":
                continue
            line = line[len(SYSTEM_ONLY) :]
        lines.append(line)
    text = "\n".join(lines) + "\n"
    return (
        text.replace("@EXEC@", " ".join(_quote(word) for word in command))
        .replace("@ENV_FILE@", str(paths.env_path).replace("%", "%%"))
        .replace("@WANTED_BY@", paths.wanted_by)
    )
