"""The record's wire form where the probes' own form is big: each GPU's NVLink links as one
list per field (`active`, `link_errors.<counter>`) instead of an object per link that
repeats every name 18 times (docs/inventory.md, `nvlink`). Applied to what is sent only:
the probes, health rules and gauges keep their form.
"""

from __future__ import annotations

from typing import Any


def compact_nvlink(nvlink: Any) -> Any:
    if not isinstance(nvlink, dict) or not isinstance(nvlink.get("links"), list):
        return nvlink
    links = [link for link in nvlink["links"] if isinstance(link, dict)]
    names: list[str] = []
    for link in links:
        names += [n for n in (link.get("errors") or {}) if n not in names]
    return {
        "links": len(links),
        "active": [link.get("active") for link in links],
        "link_errors": {name: [(link.get("errors") or {}).get(name) for link in links] for name in names},
        "errors": nvlink.get("errors"),
    }


def _device(device: Any) -> Any:
    health = device.get("health") if isinstance(device, dict) else None
    if not isinstance(health, dict) or "nvlink" not in health:
        return device
    return {**device, "health": {**health, "nvlink": compact_nvlink(health["nvlink"])}}


def wire_form(sections: dict[str, Any]) -> dict[str, Any]:
    gpu = sections.get("gpu")
    if not isinstance(gpu, dict) or not isinstance(gpu.get("devices"), list):
        return sections
    return {**sections, "gpu": {**gpu, "devices": [_device(d) for d in gpu["devices"]]}}
