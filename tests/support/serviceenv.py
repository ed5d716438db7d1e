"""The Python settings the systemd unit gives the agent's interpreter (its Environment=PYTHON*
lines), for running the agent as the service runs it: tests and benches read them from the
unit file itself, so they cannot drift from it."""

from __future__ import annotations

from pathlib import Path

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "systemd" / "faden-agent.service"
PREFIX = "Environment=PYTHON"


def service_python_env(cache_root: Path) -> dict[str, str]:
    """{PYTHON...: value} of the unit's Environment= lines, %C (the cache root) as cache_root."""
    settings = {}
    for line in UNIT.read_text().splitlines():
        if line.startswith(PREFIX):
            name, _, value = line[len("Environment=") :].partition("=")
            settings[name] = value.replace("%C", str(cache_root))
    if any("%" in value for value in settings.values()):
        raise ValueError(f"{UNIT}: a specifier other than %C in {settings}")
    return settings


def as_service(env: dict[str, str], cache_root: Path) -> dict[str, str]:
    """`env` as the unit's interpreter would see it: the unit's PYTHON* settings, and bytecode
    written (a developer's PYTHONDONTWRITEBYTECODE is not the service's)."""
    kept = {name: value for name, value in env.items() if name != "PYTHONDONTWRITEBYTECODE"}
    return {**kept, **service_python_env(cache_root)}
