"""An agent without the traffic view, for the cluster rig's mixed-version tests: fixture
`old_agent_tree`, a real old build (`git archive` of OLD_AGENT_COMMIT), not a pretend one."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OLD_AGENT_COMMIT = "6cfffa880e3ed048a63b25ed98fcf799a61bff7d"  # before traffic existed


@pytest.fixture(scope="module")
def old_agent_tree(tmp_path_factory) -> Path:
    """The tree of OLD_AGENT_COMMIT's faden_agent/ (it knows no traffic kinds), extracted once
    per module."""
    tree = tmp_path_factory.mktemp("old-agent")
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", OLD_AGENT_COMMIT, "faden_agent"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree
