"""The interpreter's lazily set version stamps, set before the supervisor forks (PSS of the
whole tree): a type's version tag and a module namespace's keys version are written into the
object the first time the specializing interpreter needs them; set here, a worker reads them
instead of copying the shared page each lies on. Only sets what the interpreter would set.
"""

from __future__ import annotations

import sys
import types

# A function that reads a builtin through a module's globals: specializing that read stamps the
# module namespace's keys and the builtins' (CPython 3.11+ LOAD_GLOBAL_BUILTIN). Each module
# runs a copy of its own: a shared one would specialize for the first module only.
_PROBE = compile("def probe():\n    return len\n", "<versions>", "exec")
_PROBE_CODE = next(const for const in _PROBE.co_consts if isinstance(const, types.CodeType))
# 3.12+ specializes an instruction at its second run; 3.11 quickens a code object after 8 calls.
RUNS = 2 if sys.version_info >= (3, 12) else 10
_MISSING = "__faden_version_probe__"  # a name no type has: looking it up stamps the type


def stamp_versions() -> tuple[int, int]:
    """Stamps every module's namespace and every class; (namespaces, classes) stamped."""
    return stamp_namespaces(), stamp_classes()


def stamp_namespaces() -> int:
    """Every module namespace whose builtins hold len (all of them, but for an odd one)."""
    stamped = 0
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if type(namespace) is not dict or "__builtins__" not in namespace:
            continue
        probe = types.FunctionType(_PROBE_CODE.replace(), namespace)
        try:
            for _ in range(RUNS):
                probe()
        except Exception:  # noqa: BLE001, S112 - a namespace whose builtins lack len: left unstamped
            continue
        stamped += 1
    return stamped


def stamp_classes() -> int:
    """Every class there is, found from `object` down (faster than scanning the collector's objects)."""
    stamped = 0
    seen: set[int] = set()
    pending: list[type] = [object]
    lookup = type.__getattribute__
    while pending:
        subclasses: list[type] = type.__subclasses__(pending.pop())  # not .__subclasses__(): `type` has one of its own
        for cls in subclasses:
            if id(cls) in seen:  # a class with several bases is a subclass of each
                continue
            seen.add(id(cls))
            pending.append(cls)
            try:
                lookup(cls, _MISSING)
            except AttributeError:
                stamped += 1
            except Exception:  # noqa: BLE001, S112 - a class whose metaclass answers oddly: left unstamped
                continue
    return stamped
