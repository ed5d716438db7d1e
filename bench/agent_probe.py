"""The benches' probe of what a Python process imports, and what each import costs it.

    python bench/agent_probe.py run DIR [SOURCE] [--objects]   `faden-agent run`, probed
    python bench/agent_probe.py imports SOURCE cpu|bytes < names.json   a fresh interpreter

Each import is counted by itself (self: its own imports subtracted, as `python -X importtime`
does), as thread CPU ns or as bytes of Python objects it leaves (tracemalloc). `run`: every
Python process of the agent's tree counts its own imports (a forked worker from its fork on)
and on SIGUSR2 writes DIR/PID.json: its modules in load order, their CPU, its CPU so far and
at its first fork. `imports`: imports the names read from stdin, prints {name: cost}.
SOURCE: the folder the agent is imported from (an older tree's). Nothing else changes.
"""

import _frozen_importlib
import os
import signal
import sys
import time

_costs: dict[str, int] = {}
_stack: list[int] = []
_load = _frozen_importlib._load_unlocked
_first_fork: dict[str, float] = {}
_counter = time.thread_time_ns
_objects_dir = ""  # run --objects: the supervisor's objects at its first fork


def _counted_load(spec):  # noqa: ANN001, ANN202 - importlib's own signature
    started = _counter()
    _stack.append(0)
    try:
        return _load(spec)
    finally:
        children = _stack.pop()
        total = _counter() - started
        _costs[spec.name] = _costs.get(spec.name, 0) + total - children
        if _stack:
            _stack[-1] += total


def _before_fork() -> None:
    if not _first_fork:
        _first_fork["cpu_s"] = time.process_time()
        _first_fork["import_ns"] = sum(_costs.values())
        if _objects_dir:
            _dump_objects(_objects_dir)


def _dump_objects(directory: str) -> None:
    """Every object reachable from the collector's and the modules (the walk immortal.py
    makes) as "address size type" lines, to name what lies on the pages a worker copies."""
    import gc

    seen: set[int] = set()
    pending = gc.get_objects() + list(sys.modules.values())
    with open(os.path.join(directory, f"objects-{os.getpid()}.txt"), "w") as out:
        while pending:
            fresh = []
            for obj in pending:
                if id(obj) not in seen:
                    seen.add(id(obj))
                    fresh.append(obj)
                    out.write(f"{id(obj)} {sys.getsizeof(obj)} {_kind(obj)}\n")
                    for address, size, part in _parts(obj):
                        out.write(f"{address} {size} {part}\n")
            pending = gc.get_referents(*fresh)


def _kind(obj: object) -> str:
    """An object's type; a code object's with its file, a class's and a module namespace's with their module."""
    kind = type(obj).__name__
    if kind == "code":
        return f"code {os.path.basename(obj.co_filename)}:{obj.co_qualname}"  # type: ignore[attr-defined]
    if isinstance(obj, type):
        return f"class of {obj.__module__}"
    if kind == "dict" and "__builtins__" in obj and "__name__" in obj:  # type: ignore[operator]
        return "module namespace"
    return kind


def _parts(obj: object) -> list[tuple[int, int, str]]:
    """The separately allocated parts of a dict, list or set (CPython 3.12's 64-bit layout):
    (address, bytes, what), so that writes to them are named too."""
    import ctypes

    kind = type(obj)
    word = ctypes.c_void_p
    if kind is dict and word.from_address(id(obj) + 40).value is None:  # a combined table
        keys = word.from_address(id(obj) + 32).value
        size = obj.__sizeof__() - dict.__sizeof__({})  # type: ignore[attr-defined]
        if keys and size > 0:
            return [(keys, size, "keys of " + ("module namespace" if "__builtins__" in obj else "dict"))]  # type: ignore[operator]
    if kind is list and obj:
        return [(word.from_address(id(obj) + 24).value or 0, obj.__sizeof__() - 40, "items of list")]  # type: ignore[attr-defined]
    if kind in (set, frozenset):
        table = word.from_address(id(obj) + 40).value or 0
        if not id(obj) <= table < id(obj) + kind.__basicsize__:
            return [(table, obj.__sizeof__() - kind.__basicsize__, "table of set")]  # type: ignore[attr-defined]
    return []


def _in_child() -> None:
    _costs.clear()  # a worker's own imports from its fork on
    _first_fork.clear()


def _dump(directory: str) -> None:
    import json  # loaded by the agent already: this adds nothing

    body = {
        "modules": [name for name, module in list(sys.modules.items()) if module is not None],
        "import_self_ns": _costs,
        "cpu_s": time.process_time(),
        "first_fork": dict(_first_fork),
    }
    path = os.path.join(directory, f"{os.getpid()}.json")
    with open(path + ".tmp", "w") as out:
        json.dump(body, out)
    os.replace(path + ".tmp", path)


def _from(source: str) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.path.insert(0, source)


def run(directory: str, source: str | None, objects: bool = False) -> None:
    global _objects_dir
    _objects_dir = directory if objects else ""
    if source:
        _from(source)
    _frozen_importlib._load_unlocked = _counted_load
    os.register_at_fork(before=_before_fork, after_in_child=_in_child)
    signal.signal(signal.SIGUSR2, lambda *_: _dump(directory))
    sys.argv = ["faden_agent", "run"]
    import runpy

    runpy.run_module("faden_agent", alter_sys=True)


def imports(source: str, unit: str) -> None:
    global _counter
    import json

    names = json.load(sys.stdin)
    _from(source)
    if unit == "bytes":
        import tracemalloc

        tracemalloc.start()
        _counter = lambda: tracemalloc.get_traced_memory()[0]  # noqa: E731
    _frozen_importlib._load_unlocked = _counted_load
    for name in names:
        try:
            __import__(name)
        except BaseException:  # noqa: BLE001, S110 - a module that does not import alone: not counted
            pass
    _frozen_importlib._load_unlocked = _load
    json.dump(_costs, sys.stdout)


if __name__ == "__main__":
    if sys.argv[1] == "run":
        objects = "--objects" in sys.argv
        args = [a for a in sys.argv[2:] if a != "--objects"]
        run(args[0], args[1] if len(args) > 1 else None, objects)
    else:
        imports(sys.argv[2], sys.argv[3])
