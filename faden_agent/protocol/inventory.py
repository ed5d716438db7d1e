"""The inventory record's receiver rule, shared by agent and reference backend (docs/inventory.md).

A full record replaces what a receiver holds; an unchanged one (same content hash) only
refreshes the gauges (the "usage" objects) of the full record it names.
"""

from __future__ import annotations

from typing import Any

FULL = "full"
UNCHANGED = "unchanged"
USAGE = "usage"


def merge_usage(full: Any, usage: Any) -> Any:
    """The full record's content with the gauges of an unchanged record put in place."""
    if isinstance(full, dict) and isinstance(usage, dict):
        merged = dict(full)
        for key, value in usage.items():
            if key == USAGE:
                merged[key] = value
            elif key in full:
                merged[key] = merge_usage(full[key], value)
        return merged
    if isinstance(full, list) and isinstance(usage, list) and len(full) == len(usage):
        return [f if u is None else merge_usage(f, u) for f, u in zip(full, usage, strict=True)]
    return full


def apply_record(current: dict[str, Any] | None, data: dict[str, Any]) -> dict[str, Any] | None:
    """The receiver's side: what it holds after `data`.
    A full record replaces; an unchanged record refreshes the gauges and collected_at of
    the full record with the same hash; None: ignore it (it refers to an older or unknown
    full record; a newer full record has arrived or is on its way)."""
    if data.get("type") == FULL:
        return data
    if current is None or current.get("hash") != data.get("hash"):
        return None
    merged = merge_usage(current, data.get(USAGE) or {})
    merged["collected_at"] = data["collected_at"]
    return merged
