"""The inventory record's receiver rule, shared by agent and reference backend (docs/inventory.md).

A full record replaces what a receiver holds; a changes record puts the parts that changed
into the full record it names (`base`) and must then hash to its `hash`; an unchanged one
(same hash) refreshes the gauges it carries. Anything that does not fit: ask for a full one.
"""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

import orjson

FULL = "full"
UNCHANGED = "unchanged"
CHANGES = "changes"
USAGE = "usage"
HEAD = ("schema", "type", "hash", "collected_at")  # a record's envelope, not its content
# What a backend says it accepts (`hello`'s `accepts`, docs/protocol.md): changes records
# and partial gauges; gzip request bodies on the uplink.
ACCEPTS_CHANGES = "inventory.changes"
ACCEPTS_GZIP = "uplink.gzip"
MAX_DEPTH = 3  # a changes path: a section, one of its fields, one item of that field


def without_usage(value: Any) -> Any:
    """The value with every "usage" object left out, at any depth."""
    if isinstance(value, dict):
        return {k: without_usage(v) for k, v in value.items() if k != USAGE}
    if isinstance(value, list):
        return [without_usage(v) for v in value]
    return value


def content(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in HEAD}


def content_hash(sections: dict[str, Any]) -> str:
    canonical = orjson.dumps(without_usage(content(sections)), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()[:32]


def merge_usage(full: Any, usage: Any) -> Any:
    """The full record's content with the gauges of `usage` put in place, gauge by gauge
    (a partial `usage` object leaves the gauges it does not name as they were)."""
    if isinstance(full, dict) and isinstance(usage, dict):
        merged = dict(full)
        for key, value in usage.items():
            if key == USAGE:
                held = full.get(USAGE)
                merged[key] = {**held, **value} if isinstance(held, dict) and isinstance(value, dict) else value
            elif key in full:
                merged[key] = merge_usage(full[key], value)
        return merged
    if isinstance(full, list) and isinstance(usage, list) and len(full) == len(usage):
        return [f if u is None else merge_usage(f, u) for f, u in zip(full, usage, strict=True)]
    return full


_NOWHERE = object()


def _at(held: Any, steps: list[Any]) -> Any:
    """The part of `held` at `steps` (keys of objects, positions in lists), or _NOWHERE."""
    for step in steps:
        if isinstance(held, dict) and isinstance(step, str) and step in held:
            held = held[step]
        elif isinstance(held, list) and type(step) is int and 0 <= step < len(held):
            held = held[step]
        else:
            return _NOWHERE
    return held


def _put(held: Any, path: Any, value: Any, remove: bool) -> bool:
    """Sets (or removes) the value at `path` inside `held`, in place; False: no such place."""
    if not isinstance(path, list) or not 1 <= len(path) <= MAX_DEPTH:
        return False
    parent, last = _at(held, path[:-1]), path[-1]
    if isinstance(parent, dict) and isinstance(last, str):
        if remove:
            parent.pop(last, None)
        else:
            parent[last] = value
        return True
    if isinstance(parent, list) and type(last) is int and 0 <= last < len(parent) and not remove:
        parent[last] = value
        return True
    return False


def _splice(held: Any, entry: Any) -> bool:
    """[path, start, remove, items]: the list at `path` gets `items` in place of its
    `remove` items from `start` on (an item added, removed or replaced in a list)."""
    if not (isinstance(entry, list) and len(entry) == 4 and isinstance(entry[3], list)):
        return False
    path, start, remove, items = entry
    if not isinstance(path, list) or not 1 <= len(path) < MAX_DEPTH:
        return False
    target = _at(held, path)
    if not isinstance(target, list) or type(start) is not int or type(remove) is not int:
        return False
    if not (0 <= start <= len(target) and 0 <= remove <= len(target) - start):
        return False
    target[start : start + remove] = items
    return True


def apply_changes(held: dict[str, Any], data: dict[str, Any]) -> dict[str, Any] | None:
    """The held record with the changes of `data` in place; None when they do not fit it."""
    changed = orjson.loads(orjson.dumps(held))  # a deep copy: a failed apply leaves `held` as it was
    sets, unsets, splices = data.get("set") or [], data.get("unset") or [], data.get("splice") or []
    if not all(isinstance(part, list) for part in (sets, unsets, splices)):
        return None
    for entry in sets:
        if not (isinstance(entry, list) and len(entry) == 2 and _put(changed, entry[0], entry[1], remove=False)):
            return None
    for path in unsets:
        if not _put(changed, path, None, remove=True):
            return None
    for entry in splices:
        if not _splice(changed, entry):
            return None
    if content_hash(changed) != data.get("hash"):
        return None
    changed["hash"] = data["hash"]
    return changed


class Received(NamedTuple):
    held: dict[str, Any] | None  # what the receiver holds now (None: nothing changed)
    behind: bool  # the record did not fit: the receiver should ask for a full record


def receive(current: dict[str, Any] | None, data: dict[str, Any]) -> Received:
    """The receiver's side of one record."""
    kind = data.get("type")
    if kind == FULL:
        return Received(data, False)
    if current is None:
        return Received(None, kind == CHANGES)
    if kind == CHANGES:
        if current.get("hash") != data.get("base"):
            # Changes travel in order in the durable queue: another base means this
            # receiver lost a record or its store (a restore): it fell behind.
            return Received(None, True)
        changed = apply_changes(current, data)
        if changed is None:
            return Received(None, True)
        current = changed
    elif current.get("hash") != data.get("hash"):
        return Received(None, False)  # an unchanged record overtaken by a newer full/changes one
    merged = merge_usage(current, data.get(USAGE) or {})
    merged["collected_at"] = data.get("collected_at")
    return Received(merged, False)


def apply_record(current: dict[str, Any] | None, data: dict[str, Any]) -> dict[str, Any] | None:
    """What the receiver holds after `data`; None: ignore it (see `receive` for `behind`)."""
    return receive(current, data).held
