"""The service's files: the rendered unit and the 0600 environment file (faden_agent/service)."""

from __future__ import annotations

import re
import stat
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faden_agent.node.membership import new_membership, write_membership
from faden_agent.service.envfile import format_env, parse_env, read_env, write_env
from faden_agent.service.manager import Outcome, ServiceError, install_files
from faden_agent.service.paths import ServicePaths, agent_command
from faden_agent.service.unit import TEMPLATE, render_unit


def paths_in(root: Path, scope: str = "system") -> ServicePaths:
    return ServicePaths(scope, root / "unit" / "faden-agent.service", root / "etc" / "agent.env")


def directives(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def test_the_packaged_template_is_the_one_unit_file_in_deploy_systemd():
    repo = Path(__file__).resolve().parents[3]
    the_unit = repo / "deploy" / "systemd" / "faden-agent.service"
    assert the_unit.is_file() and not the_unit.is_symlink()
    assert TEMPLATE.resolve() == the_unit  # the package's path is a link to it, not a copy
    copies = [
        p
        for p in repo.rglob("faden-agent.service")
        if p.is_file() and not p.is_symlink() and not {".git", "build", "dist"} & set(p.relative_to(repo).parts)
    ]
    assert copies == [the_unit]


def test_system_unit_has_notify_watchdog_restart_and_hardening(tmp_path):
    text = render_unit(paths_in(tmp_path), ["/usr/local/bin/faden-agent"])
    d = directives(text)
    assert not re.search(r"^[^#].*@[A-Z_]+@", text, re.M)  # all filled (`@mount` is a system call set)
    assert d["Type"] == ["notify"] and d["NotifyAccess"] == ["main"]  # only the supervisor notifies
    assert d["ExecStart"] == ["/usr/local/bin/faden-agent run"]
    assert d["EnvironmentFile"] == [f"-{tmp_path}/etc/agent.env"]
    assert d["Restart"] == ["always"] and d["KillMode"] == ["mixed"]
    assert d["RestartPreventExitStatus"] == ["2"]  # a bad setting: restarting cannot fix it
    assert d["ProtectKernelLogs"] == ["yes"] and d["ProtectSystem"] == ["yes"]
    assert d["SystemCallFilter"][0].startswith("~@") and d["SystemCallErrorNumber"] == ["EPERM"]
    kept = set(d["CapabilityBoundingSet"][0].split())
    assert "CAP_CHOWN" in kept and not kept & {"CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_SYS_MODULE", "CAP_SETUID"}
    assert int(d["WatchdogSec"][0]) > 0 and int(d["RestartSec"][0]) > 0
    # Longer than the supervisor's own orderly-stop bound (STOP_TIMEOUT_SEC, 10 s by default).
    assert int(d["TimeoutStopSec"][0]) > 10
    assert d["RuntimeDirectory"] == ["faden-agent"] and d["RuntimeDirectoryMode"] == ["0700"]
    assert d["StateDirectory"] == ["faden-agent"] and d["PrivateTmp"] == ["yes"]
    assert "AF_UNIX" in d["RestrictAddressFamilies"][0]  # the Docker socket and the IPC sockets
    assert d["WantedBy"] == ["multi-user.target"]


def test_user_unit_drops_what_a_user_manager_cannot_do(tmp_path):
    d = directives(render_unit(paths_in(tmp_path, "user"), ["/home/u/.local/bin/faden-agent"]))
    system_only_options = ("StateDirectory", "PrivateTmp", "ProtectHome", "ProtectKernelModules", "ProtectKernelLogs")
    for system_only in (*system_only_options, "CapabilityBoundingSet", "ProtectSystem"):
        assert system_only not in d
    assert d["WantedBy"] == ["default.target"]
    assert d["NoNewPrivileges"] == ["yes"] and "SystemCallFilter" in d  # a user manager can filter


@pytest.mark.parametrize("scope", ["system", "user"])
def test_the_service_runs_python_at_level_2_with_its_bytecode_in_the_cache_directory(tmp_path, scope):
    environment = directives(render_unit(paths_in(tmp_path, scope), ["/usr/local/bin/faden-agent"]))["Environment"]
    assert "PYTHONOPTIMIZE=2" in environment  # -OO: docstrings and asserts out of the code it loads
    # %C: /var/cache or ~/.cache, writable under ProtectSystem=yes and ProtectHome=read-only
    assert "PYTHONPYCACHEPREFIX=%C/faden-agent/bytecode" in environment


def test_exec_start_quotes_spaces_and_escapes_percent(tmp_path):
    d = directives(render_unit(paths_in(tmp_path), [sys.executable, "-m", "faden_agent"]))
    assert d["ExecStart"][0].endswith("-m faden_agent run")
    odd = directives(render_unit(paths_in(tmp_path), ["/opt/my agent/100%/faden-agent"]))
    assert odd["ExecStart"] == ["'/opt/my agent/100%%/faden-agent' run"]


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"FADEN_NODE_AGENT_[A-Z_]{1,20}", fullmatch=True),
        st.text(st.characters(blacklist_characters="\r\n\0", blacklist_categories=("Cs",)), max_size=40),
    )
)
def test_env_file_round_trips_any_single_line_value(values):
    assert parse_env(format_env(values)) == values


def test_env_file_refuses_a_line_break_by_name():
    with pytest.raises(ValueError, match="FADEN_NODE_AGENT_AGENT_ID"):
        format_env({"FADEN_NODE_AGENT_AGENT_ID": "a\nb"})


def test_env_file_is_0600_and_rewritten_only_on_change(tmp_path):
    path = tmp_path / "conf" / "agent.env"
    assert write_env(path, {"FADEN_NODE_AGENT_ENROLLMENT_TOKEN": "secret-1"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not write_env(path, {"FADEN_NODE_AGENT_ENROLLMENT_TOKEN": "secret-1"})
    assert read_env(path) == {"FADEN_NODE_AGENT_ENROLLMENT_TOKEN": "secret-1"}
    assert [p.name for p in path.parent.iterdir()] == ["agent.env"]  # no temp file left


def test_install_files_merges_settings_and_is_idempotent(tmp_path):
    paths = paths_in(tmp_path)
    first = {
        "FADEN_NODE_AGENT_BACKEND_URL": "https://backend.example",
        "FADEN_NODE_AGENT_ENROLLMENT_TOKEN": "t1",
        "HOME": "/root",
    }
    assert install_files(paths, first, ["/usr/local/bin/faden-agent"]) == (True, True)
    assert install_files(paths, first, ["/usr/local/bin/faden-agent"]) == (False, False)
    # A later run without the variables keeps them; a new value replaces the old one.
    assert install_files(paths, {"FADEN_NODE_AGENT_LOG_LEVEL": "debug"}, ["/usr/local/bin/faden-agent"]) == (
        False,
        True,
    )
    assert read_env(paths.env_path) == {
        "FADEN_NODE_AGENT_BACKEND_URL": "https://backend.example",
        "FADEN_NODE_AGENT_ENROLLMENT_TOKEN": "t1",
        "FADEN_NODE_AGENT_LOG_LEVEL": "debug",
    }
    assert "HOME" not in paths.env_path.read_text()


def test_install_files_refuses_a_bad_value_and_writes_nothing(tmp_path):
    paths = paths_in(tmp_path)
    with pytest.raises(ServiceError, match="FADEN_NODE_AGENT_HEARTBEAT_INTERVAL_SEC='soon'"):
        install_files(paths, {"FADEN_NODE_AGENT_HEARTBEAT_INTERVAL_SEC": "soon"}, ["/x"])
    assert not paths.env_path.exists() and not paths.unit_path.exists()


def test_a_bad_value_never_echoes_the_token(tmp_path):
    env = {"FADEN_NODE_AGENT_ENROLLMENT_TOKEN": "fdn_enr_secret", "FADEN_NODE_AGENT_BACKEND_URL": "ftp://x"}
    with pytest.raises(ServiceError) as caught:
        install_files(paths_in(tmp_path), env, ["/x"])
    assert "fdn_enr_secret" not in str(caught.value)


def test_the_standalone_binary_installs_the_launcher_not_its_unpacked_build(monkeypatch, tmp_path):
    launcher = tmp_path / "bin" / "faden-agent"
    launcher.parent.mkdir()
    launcher.write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "cache" / "0123-0.1.0" / "faden-agent"))
    monkeypatch.setenv("FADEN_AGENT_EXECUTABLE", str(launcher))  # set by packaging/launcher.sh
    assert agent_command() == [str(launcher)]
    monkeypatch.delenv("FADEN_AGENT_EXECUTABLE")
    assert agent_command() == [sys.executable]


def test_start_after_run_never_writes_the_spent_token(tmp_path):
    """The README's order: `run` enrolled with the token (the state file says so), then
    `start` with the same variables: the spent token stays out of the environment file."""
    paths = paths_in(tmp_path)
    state_path = tmp_path / "state" / "state.json"
    write_membership(state_path, new_membership("https://backend.example", "node-1", "cred", "a", token="tok-SPENT-1"))
    environ = {
        "FADEN_NODE_AGENT_BACKEND_URL": "https://backend.example",
        "FADEN_NODE_AGENT_STATE_PATH": str(state_path),
        "FADEN_NODE_AGENT_ENROLLMENT_TOKEN": "tok-SPENT-1",
    }
    out = Outcome()
    install_files(paths, environ, ["/x"], out=out)
    assert "FADEN_NODE_AGENT_ENROLLMENT_TOKEN" not in read_env(paths.env_path)
    assert "tok-SPENT-1" not in paths.env_path.read_text()
    assert any("already enrolled with it" in line and "tok-SPENT-1" not in line for line in out.messages)
    # A new token (the machine is to enroll again) is written; so is one with no state file.
    install_files(paths, {**environ, "FADEN_NODE_AGENT_ENROLLMENT_TOKEN": "fresh"}, ["/x"])
    assert read_env(paths.env_path)["FADEN_NODE_AGENT_ENROLLMENT_TOKEN"] == "fresh"
