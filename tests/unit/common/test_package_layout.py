"""What a wheel (pyproject's setuptools find_packages) and the standalone build (PyInstaller's
--collect-submodules) ship: both take only directories with an __init__.py as packages, so a
directory of modules without one is silently left out."""

from __future__ import annotations

from pathlib import Path

import faden_agent

ROOT = Path(faden_agent.__file__).parent


def test_every_directory_of_modules_is_a_regular_package():
    dirs = [d for d in [ROOT, *ROOT.rglob("*")] if d.is_dir() and any(d.glob("*.py"))]
    missing = [str(d.relative_to(ROOT.parent)) for d in dirs if not (d / "__init__.py").is_file()]
    assert missing == [], "without __init__.py, a wheel and the standalone build leave these out"
