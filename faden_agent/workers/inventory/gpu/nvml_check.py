"""The checks this agent can do through NVML alone, on a fresh full read of one GPU (probe.py's
device with health.py's health): one result per test (pass, warn, fail, skip) with its detail.
A failed test is a signal the verdict table already counts; these only name it test by test
(docs/inventory.md, "Checks"). The temperature and clock tests read the GPU as it is now.
"""

from __future__ import annotations

from typing import Any

from faden_agent.workers.inventory.gpu import rules
from faden_agent.workers.inventory.gpu.dcgm import FAIL, PASS, SKIP, WARN

HW_SLOWDOWNS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
TESTS = (
    "responds",
    "ecc",
    "retired_pages",
    "remapped_rows",
    "pcie_link",
    "nvlink",
    "clock_events",
    "temperature",
    "fabric",
    "recovery_action",
)


def tests(device: dict[str, Any]) -> list[dict[str, Any]]:
    """Each test's {"name", "result", "detail"} for one device as the probe read it."""
    if device.get("state") != "ok":
        reason = device.get("error") or device.get("state")
        return [_result("responds", FAIL, f"NVML: {reason}")] + [
            _result(n, SKIP, "the GPU does not answer") for n in TESTS[1:]
        ]
    health = device.get("health") or {}
    usage = {**(device.get("usage") or {}), **(health.get("usage") or {})}
    return [
        _result("responds", PASS, f"{device.get('name')} at {device.get('pci_bus_id')}"),
        _ecc(health),
        _retired(health),
        _remapped(health),
        _pcie(health, usage),
        _nvlink(health),
        _clocks(usage),
        _temperature(health, usage),
        _fabric(health),
        _recovery(health),
    ]


def outcome(results: list[dict[str, Any]]) -> str:
    found = {r["result"] for r in results}
    return FAIL if FAIL in found else WARN if WARN in found else PASS


def _result(name: str, result: str, detail: str) -> dict[str, Any]:
    return {"name": name, "result": result, "detail": detail}


def _ecc(health: dict[str, Any]) -> dict[str, Any]:
    ecc = health.get("ecc_errors")
    if ecc is None:
        return _result("ecc", SKIP, "ECC counts not supported")
    volatile, aggregate = ecc.get("uncorrected_volatile") or 0, ecc.get("uncorrected_aggregate") or 0
    if volatile:
        return _result("ecc", FAIL, f"{volatile} uncorrected ECC errors since the driver loaded")
    if aggregate:
        return _result("ecc", WARN, f"{aggregate} uncorrected ECC errors on record (none since the driver loaded)")
    return _result("ecc", PASS, "no uncorrected ECC error")


def _retired(health: dict[str, Any]) -> dict[str, Any]:
    pages = health.get("retired_pages")
    if pages is None:
        return _result("retired_pages", SKIP, "page retirement not supported (row remapping instead)")
    total = (pages.get("single_bit") or 0) + (pages.get("double_bit") or 0)
    if total >= rules.RETIRED_PAGES_LIMIT:
        return _result("retired_pages", FAIL, f"{total} retired pages: at the driver's limit")
    if pages.get("pending"):
        return _result("retired_pages", WARN, f"{total} retired pages, a retirement pending: reset needed")
    return _result("retired_pages", PASS, f"{total} retired pages, none pending")


def _remapped(health: dict[str, Any]) -> dict[str, Any]:
    rows = health.get("remapped_rows")
    if rows is None:
        return _result("remapped_rows", SKIP, "row remapping not supported")
    counts = f"{rows.get('correctable')} correctable, {rows.get('uncorrectable')} uncorrectable rows remapped"
    if rows.get("failure"):
        return _result("remapped_rows", FAIL, f"row remapping failed ({counts})")
    if rows.get("pending"):
        return _result("remapped_rows", WARN, f"a row remap pending: reset needed ({counts})")
    return _result("remapped_rows", PASS, counts)


def _pcie(health: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    pcie = health.get("pcie") or {}
    width, widest = pcie.get("width"), pcie.get("width_max")
    gen, newest = usage.get("pcie_gen"), pcie.get("gen_max")
    if width is None and gen is None:
        return _result("pcie_link", SKIP, "PCIe link not readable")
    link = f"gen {gen} of {newest}, x{width} of x{widest}"
    if width and widest and width < widest:
        return _result("pcie_link", FAIL, f"link narrower than its maximum: {link}")
    if gen and newest and gen < newest:
        # an idle GPU lowers its link generation to save power: a hint, not a fault
        return _result("pcie_link", WARN, f"link below its top generation (idle GPUs train down): {link}")
    return _result("pcie_link", PASS, link)


def _nvlink(health: dict[str, Any]) -> dict[str, Any]:
    nvlink = health.get("nvlink")
    if not nvlink:
        return _result("nvlink", SKIP, "no NVLink")
    links = nvlink.get("links") or []
    down = [str(link["link"]) for link in links if link.get("active") is False]
    errors = {name: count for name, count in (nvlink.get("errors") or {}).items() if count}
    summary = f"{len(links) - len(down)} of {len(links)} links up"
    if down and len(down) < len(links):
        return _result("nvlink", FAIL, f"{summary}; down: {', '.join(down)}")
    if errors:
        counted = ", ".join(f"{name} {count}" for name, count in sorted(errors.items()))
        return _result("nvlink", WARN, f"{summary}; error counters since the driver loaded: {counted}")
    return _result("nvlink", PASS, summary)


def _clocks(usage: dict[str, Any]) -> dict[str, Any]:
    active = usage.get("clock_events_active_s")
    if active is None:
        return _result("clock_events", SKIP, "clock event reasons not readable")
    hardware = [name for name in HW_SLOWDOWNS if name in active]
    if hardware:
        return _result("clock_events", FAIL, f"hardware slowdown active: {', '.join(hardware)}")
    if "sw_thermal_slowdown" in active:
        return _result("clock_events", WARN, "software thermal slowdown active")
    return _result("clock_events", PASS, f"active: {', '.join(sorted(active)) or 'none'}")


def _temperature(health: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    limits = health.get("temperature_limits") or {}
    gpu, memory = usage.get("temperature_c"), usage.get("memory_temperature_c")
    if gpu is None:
        return _result("temperature", SKIP, "temperature not readable")
    shutdown, slowdown, memory_max = limits.get("shutdown"), limits.get("slowdown"), limits.get("memory_max")
    said = f"GPU {gpu} C (slowdown {slowdown}, shutdown {shutdown})" + (f", memory {memory} C" if memory else "")
    if shutdown and gpu >= shutdown:
        return _result("temperature", FAIL, f"at or over the shutdown threshold: {said}")
    if (slowdown and gpu >= slowdown) or (memory_max and memory and memory >= memory_max):
        return _result("temperature", WARN, f"at or over a slowdown threshold: {said}")
    return _result("temperature", PASS, said)


def _fabric(health: dict[str, Any]) -> dict[str, Any]:
    fabric = health.get("fabric")
    if fabric is None:
        return _result("fabric", SKIP, "not on an NVSwitch fabric")
    if fabric.get("status"):
        return _result("fabric", FAIL, f"fabric registration failed: {fabric['status']}")
    if fabric.get("state") != "completed":
        return _result("fabric", WARN, f"fabric not ready: {fabric.get('state')}")
    return _result("fabric", PASS, f"registered (clique {fabric.get('clique_id')})")


def _recovery(health: dict[str, Any]) -> dict[str, Any]:
    action = health.get("recovery_action")
    if action is None:
        return _result("recovery_action", SKIP, "not reported by this driver")
    if action == "none":
        return _result("recovery_action", PASS, "none asked")
    level = FAIL if action in rules.RECOVERY_FAILED else WARN
    return _result("recovery_action", level, f"the driver asks for: {action}")
