"""The real GPU probe and health read on a GPU machine: the gpu section, each NVML call's time
and each round's CPU as JSON; --fixture DIR saves them with a state for the tests' C NVML.

    python3 bench/gpu_probe.py [--rounds 3] [--json OUT.json] [--fixture tests/nvml/fixtures]

Needs only pynvml and this checkout (the probe modules import only the standard library).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.output import emit  # noqa: E402 - after the path
from faden_agent.workers.inventory.gpu.gpm import FIGURES as GPM_FIGURES  # noqa: E402
from faden_agent.workers.inventory.gpu.health import (  # noqa: E402
    FABRIC_STATES,
    RECOVERY_ACTIONS,
    HealthReader,
)
from faden_agent.workers.inventory.gpu.probe import GpuProbe  # noqa: E402


class TimedNvml:
    """pynvml with every nvml* function timed; constants and error classes pass through."""

    def __init__(self, nvml: Any):
        self._nvml = nvml
        self.calls: dict[str, list[float]] = {}

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._nvml, name)
        if not (callable(target) and name.startswith("nvml")) or name.startswith("nvmlEventType"):
            return target

        def timed(*args: Any, **kwargs: Any) -> Any:
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


def state_of(inventory: dict[str, Any]) -> dict[str, Any]:
    """The C library's state (tests/nvml/state.py's nested form) for these real values."""
    state: dict[str, Any] = {
        "driver_version": inventory.get("driver_version") or "",
        "cuda_version": _cuda_number(inventory.get("cuda_driver_version")),
        "nvml_version": inventory.get("nvml_version") or "",
        "count": len(inventory.get("devices") or ()),
        "gpu": {},
    }
    for device in inventory.get("devices") or ():
        state["gpu"][str(device["index"])] = _gpu_state(device)
    return state


def _gpu_state(device: dict[str, Any]) -> dict[str, Any]:
    if device.get("state") != "ok":
        return {"uuid": device.get("uuid") or "", "lost": 1}
    usage, health = device.get("usage") or {}, device.get("health") or {}
    major, _, minor = (device.get("compute_capability") or "").partition(".")
    gpu: dict[str, Any] = {
        "uuid": device["uuid"],
        "name": device["name"],
        "bus_id": device["pci_bus_id"],
        "memory_total": device["memory_total"],
        "memory_used": usage.get("memory_used"),
        "cc_major": int(major) if major else None,
        "cc_minor": int(minor) if minor else None,
        "power_limit_mw": _milli(device.get("power_limit_w")),
        "power_mw": _milli(usage.get("power_draw_w")),
        "temperature": usage.get("temperature_c"),
        "temp_threshold": health.get("temperature_limits"),
        "util_gpu": usage.get("utilization_gpu"),
        "util_memory": usage.get("utilization_memory"),
        "persistence": _int(health.get("persistence_mode")),
        "recovery_action": _code(RECOVERY_ACTIONS, health.get("recovery_action")),
    }
    if device.get("mig") is not None:
        gpu["mig_current"], gpu["mig_pending"] = int(device["mig"]["enabled"]), int(device["mig"]["pending"])
    ecc, errors, hu = device.get("ecc"), health.get("ecc_errors") or {}, health.get("usage") or {}
    gpu["memory_temperature"] = hu.get("memory_temperature_c")
    if ecc is not None:
        gpu["ecc_mode"] = int(ecc["enabled"])
    gpu["ecc"] = {
        "corrected": {"volatile": hu.get("ecc_corrected_volatile"), "aggregate": hu.get("ecc_corrected_aggregate")},
        "uncorrected": {
            "volatile": errors.get("uncorrected_volatile"),
            "aggregate": errors.get("uncorrected_aggregate"),
        },
    }
    retired = health.get("retired_pages") or {}
    gpu["retired"] = {
        "sbe": retired.get("single_bit"),
        "dbe": retired.get("double_bit"),
        "pending": _int(retired.get("pending")),
    }
    if health.get("remapped_rows"):
        gpu["remap"] = {k: int(v) for k, v in health["remapped_rows"].items()}
    mask = sum(bit for bit, name in _clock_bits().items() if name in (hu.get("clock_events_active_s") or {}))
    gpu["clocks_event_reasons"] = mask
    pcie = health.get("pcie") or {}
    gpu["pcie"] = {"replay": pcie.get("replay"), "gen": hu.get("pcie_gen"), "gen_max": pcie.get("gen_max")}
    gpu["pcie"].update(width=pcie.get("width"), width_max=pcie.get("width_max"))
    nvlink = health.get("nvlink")
    if nvlink:
        gpu["nvlink"] = {"links": len(nvlink["links"])}
        for link in nvlink["links"]:
            gpu["nvlink"][str(link["link"])] = {"active": _int(link["active"]), **(link["errors"] or {})}
    if (device.get("gpm") or {}).get("available"):  # GPM's figures in thousandths of a percent (tests/nvml/gpm.c)
        figures = {str(GPM_FIGURES[name]): round(usage[name] * 1000) for name in GPM_FIGURES if name in usage}
        gpu["gpm"] = {"supported": 1, **figures}
    fabric = health.get("fabric")
    if fabric:
        gpu["fabric"] = {"state": _code(FABRIC_STATES, fabric["state"]), "status": 0 if not fabric["status"] else 999}
        gpu["fabric"]["clique"] = fabric["clique_id"]
    return _without_none(gpu)


def _clock_bits() -> dict[int, str]:
    from faden_agent.workers.inventory.gpu.health import CLOCK_EVENTS

    return CLOCK_EVENTS


def _code(table: dict[int, Any], name: Any) -> int | None:
    return next((code for code, value in table.items() if value == name), None) if name is not None else None


def _milli(watts: float | None) -> int | None:
    return round(watts * 1000) if watts is not None else None


def _int(value: Any) -> int | None:
    return int(value) if value is not None else None


def _cuda_number(text: str | None) -> int | None:
    if not text:
        return None
    major, _, minor = text.partition(".")
    return int(major) * 1000 + int(minor or 0) * 10


def _without_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    return value


def measure(nvml: Any, rounds: int) -> dict[str, Any]:
    timed = TimedNvml(nvml)
    probe = GpuProbe(timed, HealthReader())
    round_ms, round_cpu_ms = [], []
    inventory: dict[str, Any] = {}
    for _ in range(max(1, rounds)):
        started, cpu = time.perf_counter(), time.thread_time()
        inventory = probe()
        round_ms.append(round((time.perf_counter() - started) * 1000, 3))
        round_cpu_ms.append(round((time.thread_time() - cpu) * 1000, 3))
    return {
        "nvidia_ml_py_version": package_version("nvidia-ml-py"),
        "inventory": inventory,
        "round_ms": round_ms,
        "round_cpu_ms": round_cpu_ms,
        "queries": {
            name: {
                "calls": len(times),
                "median_ms": round(statistics.median(times) * 1000, 3),
                "max_ms": round(max(times) * 1000, 3),
                "total_ms": round(sum(times) * 1000, 3),
            }
            for name, times in sorted(timed.calls.items())
        },
    }


def fixture_name(inventory: dict[str, Any]) -> str:
    devices = inventory.get("devices") or [{}]
    model = devices[0].get("name") or "no-gpu"
    text = f"{model}-{inventory.get('driver_version') or 'no-driver'}"
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-") + ".json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the output to this file")
    parser.add_argument("--fixture", type=Path, help="save the output and a C-library state in this directory")
    args = parser.parse_args()
    try:
        import pynvml
    except ImportError:
        print("pynvml is not installed: pip install nvidia-ml-py", file=sys.stderr)
        return 2
    out = measure(pynvml, args.rounds)
    emit(out, args.json)
    if args.fixture:
        args.fixture.mkdir(parents=True, exist_ok=True)
        path = args.fixture / fixture_name(out["inventory"])
        path.write_text(json.dumps({"recorded": out, "state": state_of(out["inventory"])}, indent=1) + "\n")
        print(f"fixture: {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
