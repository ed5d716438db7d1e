"""`systemd-analyze verify` on the rendered unit, system and user flavour.

verify exits 0 even for unknown keys or bad values (it only warns), so any output about
the unit counts as a failure. A deliberately broken unit proves the check can fail.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from faden_agent.service.paths import ServicePaths
from faden_agent.service.unit import render_unit


def analyze(unit: Path, scope: str, tmp_path: Path) -> subprocess.CompletedProcess:
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing: tests/infra/start-services.sh installs the systemd package")
    runtime = tmp_path / "xdg-runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    argv = ["systemd-analyze", *(["--user"] if scope == "user" else []), "verify", str(unit)]
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "XDG_RUNTIME_DIR": str(runtime)},
    )


def complaints(done: subprocess.CompletedProcess, unit: Path) -> list[str]:
    return [line for line in (done.stdout + done.stderr).splitlines() if unit.name in line]


@pytest.mark.parametrize("scope", ["system", "user"])
def test_rendered_unit_verifies_clean(tmp_path, scope):
    paths = ServicePaths(scope, tmp_path / scope / "faden-agent.service", tmp_path / "agent.env")
    paths.unit_path.parent.mkdir()
    paths.unit_path.write_text(render_unit(paths, [sys.executable, "-m", "faden_agent"]))
    done = analyze(paths.unit_path, scope, tmp_path)
    assert done.returncode == 0, done.stderr
    assert complaints(done, paths.unit_path) == []


def test_verify_would_catch_a_broken_unit(tmp_path):
    paths = ServicePaths("system", tmp_path / "faden-agent.service", tmp_path / "agent.env")
    broken = render_unit(paths, [sys.executable, "-m", "faden_agent"]).replace(
        "Type=notify", "Type=notfy\nWatchdogSecs=3"
    )
    paths.unit_path.write_text(broken)
    assert len(complaints(analyze(paths.unit_path, "system", tmp_path), paths.unit_path)) == 2
