"""The agent builds this backend serves (its --downloads directory), and "agent version available".

packaging/build.sh writes `faden-agent-linux-<arch>` with `.sha256` and `.version` beside
it; a node whose reported version is older than the served build for its architecture is
shown with the newer version as available. Agents never update themselves: re-running the
install line on the node installs it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def served_version(downloads: Path | None, machine: str | None) -> str | None:
    if downloads is None or not machine:
        return None
    arch = ARCH_ALIASES.get(machine, machine)
    try:
        return (downloads / f"faden-agent-linux-{arch}.version").read_text().strip() or None
    except OSError:
        return None


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
