"""The fabric manager as the host shows it (node/fabric_manager.py), asked of tests/nvml's
systemctl stand-in (it answers `systemctl show` as systemd 252 does) and of stand-ins that fail
the way real programs do: missing, hanging, answering without end, answering nonsense."""

from __future__ import annotations

import time

from faden_agent.node import fabric_manager
from faden_agent.node.fabric_manager import FabricManager, check
from tests.nvml.state import SYSTEMCTL, SYSTEMCTL_VARIABLE

DRIVER = "550.54.15"


def with_unit(tmp_path, monkeypatch, **unit: str) -> None:
    state = tmp_path / "systemctl-state"
    state.write_text("".join(f"{k}={v}\n" for k, v in unit.items()))
    monkeypatch.setenv(SYSTEMCTL_VARIABLE, str(state))


def test_running_at_the_driver_s_version_is_no_problem(tmp_path, monkeypatch):
    with_unit(tmp_path, monkeypatch, LoadState="loaded", ActiveState="active", SubState="running", version=DRIVER)
    found = check(str(SYSTEMCTL), DRIVER)
    assert found == FabricManager(True, "active (running)", DRIVER, DRIVER) and found.problem is None


def test_stopped_missing_or_another_version_is_a_problem(tmp_path, monkeypatch):
    with_unit(tmp_path, monkeypatch, LoadState="loaded", ActiveState="inactive", SubState="dead", version=DRIVER)
    stopped = check(str(SYSTEMCTL), DRIVER)
    assert stopped.problem == "fabric manager not running (nvidia-fabricmanager: inactive (dead))"
    with_unit(tmp_path, monkeypatch, LoadState="loaded", ActiveState="failed", SubState="failed", version=DRIVER)
    assert check(str(SYSTEMCTL), DRIVER).active is False
    with_unit(tmp_path, monkeypatch, LoadState="not-found")
    assert (
        check(str(SYSTEMCTL), DRIVER).problem
        == "fabric manager not running (nvidia-fabricmanager: not-found (no such unit))"
    )
    with_unit(tmp_path, monkeypatch, LoadState="loaded", ActiveState="active", SubState="running", version="535.104.05")
    assert check(str(SYSTEMCTL), DRIVER).problem == "fabric manager 535.104.05 does not match the driver 550.54.15"


def test_a_systemctl_that_is_missing_hangs_or_babbles_is_unknown_not_an_error(tmp_path, monkeypatch):
    assert check(str(tmp_path / "no-systemctl"), DRIVER).problem == (
        f"fabric manager state unknown: {tmp_path / 'no-systemctl'}: not found"
    )
    with_unit(tmp_path, monkeypatch, hang_s="30", LoadState="loaded", ActiveState="active")
    monkeypatch.setattr(fabric_manager, "TIMEOUT_S", 0.5)
    started = time.monotonic()
    assert check(str(SYSTEMCTL), DRIVER).problem.endswith("no answer within 0.5 s")  # type: ignore[union-attr]
    assert time.monotonic() - started < 5
    endless = tmp_path / "endless"
    endless.write_text("#!/bin/sh\nyes ActiveState=active\n")
    endless.chmod(0o755)
    assert check(str(endless), DRIVER).active is True  # what it said within the bound
    nonsense = tmp_path / "nonsense"
    nonsense.write_text("#!/bin/sh\necho what\n")
    nonsense.chmod(0o755)
    assert (
        check(str(nonsense), DRIVER).problem == f"fabric manager state unknown: {nonsense} show answered no ActiveState"
    )
