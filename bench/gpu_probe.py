"""The real GPU probe on a machine with NVIDIA GPUs: prints the inventory's "gpu" section
as JSON and how long each NVML query took.

    python3 bench/gpu_probe.py [--rounds 3] [--json OUT.json]

Needs only Python and pynvml (pip install nvidia-ml-py): it loads the agent's own probe
(faden_agent/workers/inventory/gpu.py) from this checkout by file path, without the rest
of the agent. Round 1 includes nvmlInit; later rounds show the steady-state cost.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

GPU_MODULE = Path(__file__).resolve().parents[1] / "faden_agent" / "workers" / "inventory" / "gpu.py"


def load_probe_module():
    spec = importlib.util.spec_from_file_location("faden_gpu_probe", GPU_MODULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TimedNvml:
    """pynvml with every nvml* function timed; constants and error classes pass through."""

    def __init__(self, nvml):
        self._nvml = nvml
        self.calls: dict[str, list[float]] = {}

    def __getattr__(self, name):
        target = getattr(self._nvml, name)
        if not (callable(target) and name.startswith("nvml")):
            return target

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return target(*args, **kwargs)
            finally:
                self.calls.setdefault(name, []).append(time.perf_counter() - started)

        return timed


def package_version(name: str) -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version(name)
    except (ImportError, PackageNotFoundError):
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the output to this file")
    args = parser.parse_args()
    try:
        import pynvml
    except ImportError:
        print("pynvml is not installed: pip install nvidia-ml-py", file=sys.stderr)
        return 2
    probe_module = load_probe_module()
    nvml = TimedNvml(pynvml)
    probe = probe_module.GpuProbe(nvml)
    rounds = []
    inventory = None
    for _ in range(max(1, args.rounds)):
        started = time.perf_counter()
        inventory = probe()
        rounds.append(round((time.perf_counter() - started) * 1000, 3))
    out = {
        "nvidia_ml_py_version": package_version("nvidia-ml-py"),
        "inventory": inventory,
        "round_ms": rounds,
        "queries": {
            name: {
                "calls": len(times),
                "median_ms": round(statistics.median(times) * 1000, 3),
                "max_ms": round(max(times) * 1000, 3),
                "total_ms": round(sum(times) * 1000, 3),
            }
            for name, times in sorted(nvml.calls.items())
        },
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
