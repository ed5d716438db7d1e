"""The outbox's meta table is the cursor store: every key the agent reads or writes there is
declared, with its owner, in backend/outbox.py CURSOR_KEYS (found by reading the code: a
literal or a module-level constant passed to get_meta / set_meta)."""

from __future__ import annotations

import ast
from pathlib import Path

import faden_agent
from faden_agent.backend.outbox import CURSOR_KEYS

ROOT = Path(faden_agent.__file__).parent


def keys_used(tree: ast.Module) -> set[str]:
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if node.func.attr in ("get_meta", "set_meta"):
                arg = node.args[0]
                found.add(arg.value if isinstance(arg, ast.Constant) else constants.get(getattr(arg, "id", ""), "?"))
    return found


def test_every_cursor_key_is_declared():
    used = {}
    for path in ROOT.rglob("*.py"):
        for key in keys_used(ast.parse(path.read_text())):
            used.setdefault(key, []).append(str(path.relative_to(ROOT)))
    assert used, "the scan found no cursor at all: it is broken"
    undeclared = {key: where for key, where in used.items() if key not in CURSOR_KEYS}
    assert undeclared == {}, "declare these in backend/outbox.py CURSOR_KEYS"
    assert set(CURSOR_KEYS) <= set(used), "declared but never used"
