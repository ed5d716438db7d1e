"""The service's environment file: FADEN_NODE_AGENT_* settings, mode 0600 (it may hold the token).

Written from the current variables merged over what the file already holds, so running
`faden-agent start` again without the variables keeps the settings of the first run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from faden_agent.config import PREFIX
from faden_agent.disk.files import replace_file_if_changed

_BLANKS = " \t\r"
_ESCAPES = {"\\": "\\\\", '"': '\\"', "$": "\\$", "`": "\\`"}


class EnvFileError(ValueError):
    """A value that cannot go into an environment file; str() names the variable."""


def agent_variables(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k.startswith(PREFIX)}


def format_env(values: Mapping[str, str]) -> str:
    lines = ["# faden-agent settings (written by `faden-agent start`); mode 0600: may hold the token"]
    for key in sorted(values):
        value = values[key]
        if "\n" in value or "\r" in value or "\0" in value:
            raise EnvFileError(f"{key}: a value with a line break cannot go into the environment file")
        lines.append(f'{key}="{"".join(_ESCAPES.get(ch, ch) for ch in value)}"')
    return "\n".join(lines) + "\n"


def parse_env(text: str) -> dict[str, str]:
    """The subset of systemd's EnvironmentFile syntax that format_env writes (plus bare values)."""
    values: dict[str, str] = {}
    for raw in text.split("\n"):  # systemd splits on newlines only (not on every Unicode break)
        line = raw.strip(_BLANKS)
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip(_BLANKS)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            inner, out, i = value[1:-1], [], 0
            while i < len(inner):
                if inner[i] == "\\" and i + 1 < len(inner) and value[0] == '"' and inner[i + 1] in _ESCAPES:
                    out.append(inner[i + 1])
                    i += 2
                else:
                    out.append(inner[i])
                    i += 1
            value = "".join(out)
        values[key.strip(_BLANKS)] = value
    return values


def read_env(path: Path) -> dict[str, str]:
    try:
        return parse_env(path.read_text())
    except FileNotFoundError:
        return {}


def write_env(path: Path, values: Mapping[str, str]) -> bool:
    """Atomically write the file with mode 0600; return whether its content changed."""
    return replace_file_if_changed(path, format_env(values).encode(), 0o600)


def forget_token(path: Path, token: str) -> bool:
    """Remove the enrollment token from the file once it is spent (it buys nothing more and
    must not linger in a file); only when the file still holds that very token, so a new
    one put there meanwhile stays. Returns whether the file changed."""
    values = read_env(path)
    key = f"{PREFIX}ENROLLMENT_TOKEN"
    if values.get(key) != token:
        return False
    del values[key]
    return write_env(path, values)


def effective_environ(path: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The service's settings with the current variables on top: what `doctor` should check."""
    env = dict(os.environ if environ is None else environ)
    merged = read_env(path) if os.access(path, os.R_OK) else {}
    merged.update(env)
    return merged
