"""One name per idea, read from the code: a constant in seconds ends in _S (_SEC is kept for
the names of environment variables, which config.py's fields mirror)."""

from __future__ import annotations

import ast
from pathlib import Path

import faden_agent

ROOT = Path(faden_agent.__file__).parent


def test_no_constant_is_named_sec():
    found = []
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            for target in targets:
                if isinstance(target, ast.Name) and target.id.isupper() and target.id.endswith("_SEC"):
                    found.append(f"{path.relative_to(ROOT)}: {target.id}")
    assert found == [], "seconds in code end in _S"
