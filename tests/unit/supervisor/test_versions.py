"""The supervisor stamps the interpreter's lazy version stamps before forking (versions.py):
a forked child that looks attributes up on the supervisor's classes, or runs code reading a
module's globals, then writes none of them into the shared pages. Measured in a real fork by
the child's own Private_Dirty, both runs with the objects immortal (immortal.py), as the
supervisor leaves them, so only the stamps differ."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import require
from tests.unit.supervisor.test_immortal import FORK, interpreter_with_immortal_objects

PREFORK = Path(__file__).resolve().parents[3] / "faden_agent" / "supervisor" / "prefork"

# 5,000 classes and 2,000 modules of 60 globals each (their key tables ~2 KiB each, as a real
# module's); the child reads an attribute of each class and a global of each module (a fresh
# function each, run until its read specializes).
FORKED = (
    """
import gc, importlib.util, os, re, sys, types
def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(sys.argv[1], name + ".py"))
    module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
    return module
immortal, versions = load("immortal"), load("versions")
classes = [type(f"C{i}", (), {"value": i}) for i in range(5000)]
modules = []
for i in range(2000):
    module = types.ModuleType(f"faden_versions_test_{i}")
    module.__dict__.update({f"name_{k}": k for k in range(60)}, __builtins__=__builtins__)
    sys.modules[module.__name__] = modules.append(module) or module
reader = compile("def read():\\n    return name_7 + len('')\\n", "reader", "exec").co_consts[0]
stamped = versions.stamp_versions() if sys.argv[2] == "stamped" else (0, 0)
immortal.immortalize_heap()
gc.freeze()
"""
    + FORK
    + """if pid == 0:
    functions = [types.FunctionType(reader.replace(), module.__dict__) for module in modules]
    before = private_dirty_kib()
    total = sum(cls.value for cls in classes)
    for function in functions:
        for _ in range(3):
            total += function()
    copied = private_dirty_kib() - before
    os.write(write, f"{stamped[0]} {stamped[1]} {copied} {total}".encode())
    os._exit(0)
os.waitpid(pid, 0)
print(os.read(read, 200).decode())
"""
)


def forked(python: str, mode: str) -> tuple[int, int, int]:
    """(module namespaces stamped, classes stamped, KiB the child copied)."""
    out = subprocess.run([python, "-c", FORKED, str(PREFORK), mode], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    namespaces, classes, copied_kib, total = map(int, out.stdout.split())
    assert total == sum(range(5000)) + 2000 * 3 * 7  # the stamped objects still read right
    return namespaces, classes, copied_kib


def test_stamped_classes_and_modules_are_not_copied_by_a_child_that_reads_them():
    python = interpreter_with_immortal_objects()
    if python is None:
        require("a CPython 3.12 or 3.13", "none was found (PATH, pyenv)")
    _, _, copied_plain = forked(python, "plain")
    # a version tag in each of 5,000 classes and a keys version in each of 2,000 key tables
    assert copied_plain > 4000, copied_plain
    namespaces, classes, copied_stamped = forked(python, "stamped")
    assert namespaces >= 2000 and classes >= 5000
    assert copied_stamped < copied_plain / 5, (copied_stamped, copied_plain)
