"""The supervisor marks its objects immortal before forking (immortal.py): a
forked child that calls the supervisor's functions, or runs code that counts its constants,
then copies almost none of the pages they live on. Measured in a real fork, by the child's
own Private_Dirty, on a CPython 3.12 or 3.13 (the test runner's, or one found on the
machine); on other interpreters the marking must do nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from faden_agent.supervisor.prefork import immortal
from tests.conftest import require
from tests.support.pythons import cpythons

REPO = Path(__file__).resolve().parents[3]
MODULE = REPO / "faden_agent" / "supervisor" / "prefork" / "immortal.py"

# Loads immortal.py alone (a bare interpreter has no zmq or docker), runs SETUP (which makes
# `functions`), optionally marks everything immortal, forks; the child runs TOUCH on each
# function and reports what was marked, how many KiB of pages that copied, the count of the
# object WATCHED names (looked up only then: a global would make it reachable) and CHECK (2:
# the marked code still works).
# Defines private_dirty_kib() and forks: the child's lines follow under `if pid == 0:`.
FORK = """
def private_dirty_kib():
    return int(re.search(r"^Private_Dirty:\\s+(\\d+)", open("/proc/self/smaps_rollup").read(), re.M).group(1))
read, write = os.pipe()
pid = os.fork()
"""
FORKED = (
    """
import gc, importlib.util, os, re, sys, types
spec = importlib.util.spec_from_file_location("immortal", sys.argv[1])
immortal = importlib.util.module_from_spec(spec); spec.loader.exec_module(immortal)
SETUP
marked = immortal.immortalize_heap() if sys.argv[2] == "immortal" else 0
gc.freeze()
"""
    + FORK
    + """if pid == 0:
    before = private_dirty_kib()
    for function in functions:
        TOUCH
    copied = private_dirty_kib() - before
    os.write(write, f"{marked} {copied} {sys.getrefcount(WATCHED)} {CHECK}".encode())
    os._exit(0)
os.waitpid(pid, 0)
print(os.read(read, 200).decode())
"""
)
# 20,000 function objects; taking and dropping a reference to each (what reading a global or
# calling one does) writes its count.
REFERENCES = {
    "SETUP": """
def add_one(x):
    return x + 1
functions = [types.FunctionType(add_one.__code__, globals(), f"f{i}") for i in range(20000)]
gc.collect()
""",
    "TOUCH": "pass",
    "WATCHED": "functions[7]",
    "CHECK": "functions[7](1)",
}
# 5,000 functions whose constants (a text and a tuple of numbers) only their code objects
# hold: the collector untracks such tuples, and a code object shows it none of what it holds;
# each run of a function counts its constants.
CONSTANTS = {
    "SETUP": """
source = "".join(
    f"def f{i}():\\n    return 'the constant text of function {i}', ({i} + 10**6, {i}.5)\\n" for i in range(5000)
)
namespace = {}
exec(compile(source, "generated", "exec"), namespace)
functions = [namespace[f"f{i}"] for i in range(5000)]
del source
for _ in range(3):  # as the many collections of a long import do: each untracks what it may
    gc.collect()
""",
    "TOUCH": "function()",
    "WATCHED": "functions[7].__code__.co_consts[-1]",
    "CHECK": "len(functions[7]())",
}


def interpreter_with_immortal_objects() -> str | None:
    """A CPython 3.12 or 3.13 that runs: this one, or one found on the machine."""
    if immortal.unsupported_reason() is None:
        return sys.executable
    found = cpythons()
    return found.get("3.12") or found.get("3.13")


def forked(python: str, scenario: dict[str, str], mode: str) -> tuple[int, int, int]:
    """(objects marked, KiB the child copied, WATCHED's count) of FORKED."""
    script = FORKED
    for placeholder, code in scenario.items():
        script = script.replace(placeholder, code)
    out = subprocess.run([python, "-c", script, str(MODULE), mode], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    marked, copied_kib, refcount, result = map(int, out.stdout.split())
    assert result == 2  # the marked code still works
    return marked, copied_kib, refcount


def test_marked_objects_are_not_copied_by_a_forked_child_that_references_them():
    python = interpreter_with_immortal_objects()
    if python is None:
        require("a CPython 3.12 or 3.13", "none was found (PATH, pyenv)")
    marked, copied_plain, refcount_plain = forked(python, REFERENCES, "plain")
    assert marked == 0 and refcount_plain < 10
    # 20,000 function objects of ~150 bytes: a reference to each writes its count: ~3 MiB.
    assert copied_plain > 2000, copied_plain
    marked, copied_immortal, refcount_immortal = forked(python, REFERENCES, "immortal")
    assert marked > 20000
    assert refcount_immortal == immortal.IMMORTAL_REFCNT
    assert copied_immortal < copied_plain / 5, (copied_immortal, copied_plain)


@pytest.mark.skipif(immortal.unsupported_reason() is None, reason="this interpreter has immortal objects")
def test_an_interpreter_without_that_header_is_left_alone():
    reason = immortal.unsupported_reason()
    assert "{}.{}".format(*sys.version_info[:2]) in reason or "build" in reason
    before = sys.getrefcount(test_an_interpreter_without_that_header_is_left_alone)
    assert immortal.immortalize_heap() == 0
    assert sys.getrefcount(test_an_interpreter_without_that_header_is_left_alone) == before


def test_constants_only_code_objects_hold_are_marked_and_not_copied():
    python = interpreter_with_immortal_objects()
    if python is None:
        require("a CPython 3.12 or 3.13", "none was found (PATH, pyenv)")
    _, copied_plain, refcount_plain = forked(python, CONSTANTS, "plain")
    assert refcount_plain < 10
    # 10,000 constants of 60-90 bytes spread over the heap: counting each copies ~0.8 MiB.
    assert copied_plain > 400, copied_plain
    _, copied_marked, refcount_marked = forked(python, CONSTANTS, "immortal")
    assert refcount_marked == immortal.IMMORTAL_REFCNT
    # 3.12: 0.3 against 2.9 MiB; 3.13 writes more of its own at each call (1.3 against 2.9)
    assert copied_marked < copied_plain / 2, (copied_marked, copied_plain)
