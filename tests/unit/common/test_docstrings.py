"""A module docstring is a contract of at most five lines (role, what it owns, invariants);
rationale and figures live in docs/ and commit bodies, not behind a pointer line in every module."""

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
    assert long == {}, "module docstrings over five lines (move the rest to docs/ or the commit body)"


def test_no_module_docstring_is_a_pointer_to_an_archive():
    pointing = []
    for path in sorted(ROOT.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()), clean=True) or ""
        if "design-notes.md" in doc and "prefork" not in path.parts:  # the prefork notes are the page's subject
            pointing.append(str(path.relative_to(ROOT)))
    assert pointing == []
