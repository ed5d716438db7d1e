"""install_and_start / stop / restart / uninstall / service_state: each safe to repeat."""

from __future__ import annotations

import getpass
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faden_agent.config import PREFIX, ConfigError, load_config
from faden_agent.disk.files import replace_file_if_changed
from faden_agent.node.membership import MembershipError, load_membership
from faden_agent.service.envfile import EnvFileError, agent_variables, read_env, write_env
from faden_agent.service.paths import UNIT_NAME, ServicePaths, agent_command
from faden_agent.service.systemctl import ServiceError, show, systemctl
from faden_agent.service.unit import render_unit

TOKEN_VARIABLE = f"{PREFIX}ENROLLMENT_TOKEN"

__all__ = ["ServiceError", "Outcome", "install_and_start", "stop", "restart", "uninstall", "service_state"]


@dataclass
class Outcome:
    """What an action did, as lines for the operator."""

    messages: list[str] = field(default_factory=list)

    def say(self, text: str) -> None:
        self.messages.append(text)


def lingering_enabled(user: str) -> bool:
    return Path("/var/lib/systemd/linger", user).exists()


def install_files(
    paths: ServicePaths, environ: Mapping[str, str], command: list[str] | None = None, out: Outcome | None = None
) -> tuple[bool, bool]:
    """Write the unit and the environment file; return (unit changed, env changed).

    The settings are validated with the agent's own parser first, so a bad value is
    reported here, by name, instead of in a crash loop of the service. A token the state
    file marks spent is never written (`run` enrolled with it before `start`).
    """
    values = read_env(paths.env_path)
    values.update(agent_variables(environ))
    try:
        config = load_config(values)
    except ConfigError as exc:
        raise ServiceError(f"not installed: {exc}") from None
    if _spent(config.state_path, values.get(TOKEN_VARIABLE)):
        del values[TOKEN_VARIABLE]
        if out is not None:
            out.say(
                f"{TOKEN_VARIABLE} left out of the environment file: this machine already enrolled with it "
                f"(state file {config.state_path})"
            )
    try:
        env_changed = write_env(paths.env_path, values)
    except EnvFileError as exc:
        raise ServiceError(f"not installed: {exc}") from None
    unit_changed = replace_file_if_changed(
        paths.unit_path, render_unit(paths, command or agent_command()).encode(), 0o644
    )
    return unit_changed, env_changed


def _spent(state_path: Path, token: str | None) -> bool:
    try:
        membership = load_membership(state_path)
    except MembershipError:
        return False  # cannot tell: the agent itself refuses to present it again
    return token is not None and membership is not None and membership.spent(token)


def install_and_start(
    paths: ServicePaths | None = None, environ: Mapping[str, str] | None = None, restart_running: bool = False
) -> Outcome:
    """Install and start; a running service is restarted when its files changed or when
    `restart_running` says so (a new build was installed under the same path)."""
    paths = paths or ServicePaths.for_current_user()
    out = Outcome()
    unit_changed, env_changed = install_files(paths, os.environ if environ is None else environ, out=out)
    out.say(f"unit {paths.unit_path} {'written' if unit_changed else 'unchanged'}")
    out.say(f"environment file {paths.env_path} (mode 0600) {'written' if env_changed else 'unchanged'}")
    was_active = show(paths).get("ActiveState") == "active"
    if unit_changed:
        systemctl(paths, "daemon-reload")
    systemctl(paths, "enable", UNIT_NAME)
    systemctl(paths, "reset-failed", UNIT_NAME, check=False)  # a start limit hit earlier must not block
    if was_active and (unit_changed or env_changed or restart_running):
        systemctl(paths, "restart", UNIT_NAME)
        out.say(f"{paths.scope} service {UNIT_NAME} restarted (containers keep running)")
    else:
        systemctl(paths, "start", UNIT_NAME)
        out.say(f"{paths.scope} service {UNIT_NAME} {'already running' if was_active else 'enabled and started'}")
    if paths.scope == "user":
        user = getpass.getuser()
        if not lingering_enabled(user):
            out.say(
                f"note: this is a user service; it stops when {user} logs out. To keep it running, "
                f"run once as root: loginctl enable-linger {user}"
            )
    return out


def _require_installed(paths: ServicePaths) -> None:
    if not paths.unit_path.exists():
        raise ServiceError(
            f"the {paths.scope} service is not installed ({paths.unit_path} missing): run `faden-agent start`"
        )


def stop(paths: ServicePaths | None = None) -> Outcome:
    paths = paths or ServicePaths.for_current_user()
    _require_installed(paths)
    systemctl(paths, "stop", UNIT_NAME)
    return Outcome([f"{paths.scope} service {UNIT_NAME} stopped (containers keep running)"])


def restart(paths: ServicePaths | None = None) -> Outcome:
    paths = paths or ServicePaths.for_current_user()
    _require_installed(paths)
    systemctl(paths, "reset-failed", UNIT_NAME, check=False)
    systemctl(paths, "restart", UNIT_NAME)
    return Outcome([f"{paths.scope} service {UNIT_NAME} restarted (containers keep running)"])


def uninstall(
    purge: bool = False, paths: ServicePaths | None = None, environ: Mapping[str, str] | None = None
) -> Outcome:
    """Stop, disable and remove the unit and its environment file; the state only on purge."""
    paths = paths or ServicePaths.for_current_user()
    out = Outcome()
    env = dict(read_env(paths.env_path))
    env.update(agent_variables(os.environ if environ is None else environ))
    if paths.unit_path.exists():
        systemctl(paths, "disable", "--now", UNIT_NAME, check=False)
        paths.unit_path.unlink()
        systemctl(paths, "daemon-reload", check=False)
        systemctl(paths, "reset-failed", UNIT_NAME, check=False)
        out.say(f"{paths.scope} service {UNIT_NAME} stopped, disabled and removed (containers keep running)")
    else:
        out.say(f"no {paths.scope} service installed")
    paths.env_path.unlink(missing_ok=True)
    try:
        state_path = load_config(env).state_path
    except ConfigError:
        state_path = None
    state_dir = state_path.parent if state_path else None
    if state_path is None:
        out.say("the state directory is unknown (bad settings); nothing purged")
    elif purge:
        _purge_state(state_path)
        out.say(f"purged the agent's state in {state_dir}: this machine must be enrolled again")
    else:
        out.say(f"kept the state directory {state_dir} (the node's identity); `uninstall --purge` removes it")
    return out


def _purge_state(state_path: Path) -> None:
    # Remove the whole directory only when it is the agent's own; a state file placed in a
    # shared directory (STATE_PATH=/home/me/state.json) takes only the agent's files along.
    if state_path.parent.name == "faden-agent":
        shutil.rmtree(state_path.parent, ignore_errors=True)
        return
    for name in (state_path.name, "outbox.sqlite", "outbox.sqlite-wal", "outbox.sqlite-shm"):
        (state_path.parent / name).unlink(missing_ok=True)


def service_state(paths: ServicePaths | None = None) -> dict[str, Any]:
    """The service as systemd sees it, for `status` and `doctor`."""
    paths = paths or ServicePaths.for_current_user()
    props = show(paths)
    installed = paths.unit_path.exists()
    if not props:
        return {"scope": paths.scope, "installed": installed, "systemd": False, "active": None}
    main_pid = int(props.get("MainPID") or 0)
    return {
        "scope": paths.scope,
        "installed": installed and props.get("LoadState") == "loaded",
        "systemd": True,
        "unit": str(paths.unit_path),
        "active": props.get("ActiveState"),
        "sub": props.get("SubState"),
        "enabled": props.get("UnitFileState"),
        "main_pid": main_pid or None,
        "restarts": int(props.get("NRestarts") or 0),
        "since": props.get("ExecMainStartTimestamp") or None,
        "result": props.get("Result"),
    }
