"""The measured side of bench/footprint_census.py, which imports nothing of the bench's:

python bench/census_child.py preload PACKAGES objects|cpu   the supervisor's preload, PACKAGES
                                                             (comma-separated) as empty stand-ins
python bench/census_child.py traced                          `faden-agent run`, each code object's
                                                             first run recorded per process
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any


def preload_in_child(stand_ins: tuple[str, ...], objects: bool) -> dict[str, Any]:
    """(child side) Imports what the supervisor preloads, the packages in `stand_ins` answered
    by empty modules whose every attribute is a class; what it cost."""
    import importlib
    import importlib.abc
    import importlib.machinery
    import tracemalloc
    import types
    import warnings

    class AnyAttribute(type):
        def __getattr__(cls, name: str) -> str:
            if name.startswith("__"):
                raise AttributeError(name)
            return "1.41"  # a string serves the constants read at import (API versions)

    class StandIn(types.ModuleType):
        def __getattr__(self, name: str) -> type:
            if name.startswith("__"):
                raise AttributeError(name)
            return AnyAttribute(name, (Exception,), {})

    class Loader(importlib.abc.Loader):
        def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
            module = StandIn(spec.name)
            module.__path__ = []
            return module

        def exec_module(self, module: types.ModuleType) -> None:
            pass

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
            if name.partition(".")[0] in stand_ins:
                return importlib.machinery.ModuleSpec(name, Loader(), is_package=True)
            return None

    sys.meta_path.insert(0, Finder())
    warnings.filterwarnings("ignore")
    from faden_agent.supervisor.prefork.preload import CHARSET_GUESSERS, SHARED_MODULES

    for name in CHARSET_GUESSERS:  # as the preload keeps them out
        sys.modules[name] = None  # type: ignore[assignment]
    from faden_agent.workers import WORKERS

    before, started = len(sys.modules), time.process_time()
    if objects:
        tracemalloc.start()
    for target in [t for name, t in WORKERS.items() if name != "peer"]:
        importlib.import_module(target.partition(":")[0])
    for module in SHARED_MODULES:
        importlib.import_module(module)
    return {
        "cpu_s": time.process_time() - started,
        "modules": len(sys.modules) - before,
        "objects_kib": tracemalloc.get_traced_memory()[0] // 1024 if objects else None,
    }


def traced_agent() -> None:
    """(child side) `faden-agent run`, every code object's first run recorded per process
    (a forked worker from its fork on); SIGUSR2 writes $CENSUS_DIR/PID.json."""
    import runpy

    monitoring = sys.monitoring  # type: ignore[attr-defined]  # 3.12+
    tool = monitoring.PROFILER_ID
    monitoring.use_tool_id(tool, "census")
    ran: set[str] = set()

    def started(code: Any, offset: int) -> Any:
        ran.add(f"{code.co_filename}:{code.co_qualname}")
        return monitoring.DISABLE  # once a code object is enough

    def after_fork_in_child() -> None:
        ran.clear()
        monitoring.restart_events()  # what the worker runs, also what the supervisor ran before

    def dump(*_: Any) -> None:
        Path(os.environ["CENSUS_DIR"], f"{os.getpid()}.json").write_text(json.dumps(sorted(ran)))

    monitoring.register_callback(tool, monitoring.events.PY_START, started)
    os.register_at_fork(after_in_child=after_fork_in_child)
    signal.signal(signal.SIGUSR2, dump)
    monitoring.set_events(tool, monitoring.events.PY_START)
    sys.argv = ["faden_agent", "run"]
    runpy.run_module("faden_agent", run_name="__main__")


def main() -> int:
    if sys.argv[1] == "preload":
        packages = tuple(p for p in sys.argv[2].split(",") if p)
        print(json.dumps(preload_in_child(packages, objects=sys.argv[3] == "objects")))
    else:
        traced_agent()
    return 0


if __name__ == "__main__":
    sys.exit(main())
