"""The agent builds this backend serves (its --downloads directory), and "agent version available"."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}
BUILD_LINE = re.compile(rb"^# faden-agent standalone build ([0-9A-Za-z.+-]+) \(([0-9a-z_]+)\)$", re.MULTILINE)
HEAD_BYTES = 256  # the line is the binary's second


def build_version(binary: Path) -> str | None:
    """The version a standalone build says in its header; None for anything else."""
    try:
        with open(binary, "rb") as fh:
            head = fh.read(HEAD_BYTES)
    except OSError:
        return None
    found = BUILD_LINE.search(head)
    return found.group(1).decode() if found else None


def served_version(downloads: Path | None, machine: str | None) -> str | None:
    if downloads is None or not machine:
        return None
    arch = ARCH_ALIASES.get(machine, machine)
    return build_version(downloads / f"faden-agent-linux-{arch}")


def version_key(version: str) -> tuple:
    """Orders 0.1.0 < 0.1.1 < 0.2.0 < 0.10.0; a local part (+build) sorts after its release."""
    release, _, local = version.partition("+")
    numbers = tuple(int(n) for n in re.findall(r"\d+", release))
    return numbers, local


def with_available_version(node: dict[str, Any], downloads: Path | None) -> dict[str, Any]:
    """The node with `available_version`: the served build when it is newer than the node's, else None."""
    machine = (node.get("platform") or {}).get("machine") if isinstance(node.get("platform"), dict) else None
    served = served_version(downloads, machine)
    running = node.get("version")
    newer = served if served and running and version_key(served) > version_key(str(running)) else None
    return {**node, "available_version": newer}
