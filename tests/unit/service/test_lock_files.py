"""The lock files the release is built from (packaging/lock.sh) still match what they lock:
every dependency of pyproject.toml (and PyInstaller of build-tools.in) pinned, at a version
its range allows, with hashes. A dependency added without `bash packaging/lock.sh` fails here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[3]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+) \\\n((?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", re.M)


def pins(lock: str) -> dict[str, str]:
    text = (REPO / "packaging" / lock).read_text()
    found = {canonicalize_name(name): version for name, version, _hashes in PIN.findall(text)}
    named = re.findall(r"^[A-Za-z0-9]\S*==", text, re.M)
    assert len(found) == len(named), "a pin without its hashes"
    return found


def test_every_dependency_is_locked_within_its_range():
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    locked = pins("requirements.lock")
    for line in declared:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{name} is not in packaging/requirements.lock: run bash packaging/lock.sh"
        assert requirement.specifier.contains(locked[name]), f"{name}=={locked[name]} is outside {requirement}"


def test_the_build_tools_are_locked_as_pinned():
    locked = pins("build-tools.lock")
    for line in (REPO / "packaging/build-tools.in").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            assert requirement.specifier.contains(locked[canonicalize_name(requirement.name)]), requirement
    assert "pyinstaller" in locked
