"""A module docstring is a contract of at most five lines (role, what it owns, invariants);
rationale and figures live in docs/ (docs/design-notes.md) and commit bodies."""

from __future__ import annotations

import ast
from pathlib import Path

import faden_agent

ROOT = Path(faden_agent.__file__).parent
MAX_LINES = 5


def test_every_module_docstring_is_at_most_five_lines():
    long = {}
    for path in sorted(ROOT.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()), clean=True)
        if doc and len(doc.splitlines()) > MAX_LINES:
            long[str(path.relative_to(ROOT))] = len(doc.splitlines())
    assert long == {}, "module docstrings over five lines (move the rest to docs/design-notes.md)"
