"""One inventory record from the probes' results, and when to send it in full."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from faden_agent.disk.files import replace_file
from faden_agent.protocol.inventory import (
    CHANGES,
    FULL,
    MAX_DEPTH,
    UNCHANGED,
    USAGE,
    content,
    content_hash,
    without_usage,
)
from faden_agent.workers.inventory.gauge_rules import moved
from faden_agent.workers.inventory.probes import OK, ProbeResult

SCHEMA_VERSION = 2  # 2: NVLink links in the compact form (wire_form.py)
SECTIONS = ("host", "disks", "network", "docker", "gpu")
FULL_REFRESH_S = 3600.0
HELD_FILE = "inventory-held.json"
MAX_HELD_BYTES = 4 * 1024 * 1024
log = logging.getLogger(__name__)


def usage_shape(value: Any, keep: Callable[[tuple[Any, ...], str, Any], bool] | None = None, path: tuple = ()) -> Any:
    """The "usage" objects alone, in the shape of the full record: dicts by key, lists by
    position (aligned with the full record of the same hash); None where there is none.
    `keep(path, name, value)` picks the gauges (all when None)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key == USAGE and isinstance(item, dict):
                picked = {n: g for n, g in item.items() if keep is None or keep(path, n, g)}
                if picked or keep is None:
                    out[key] = picked
            elif key == USAGE:
                out[key] = item
            else:
                inner = usage_shape(item, keep, (*path, key))
                if inner is not None:
                    out[key] = inner
        return out or None
    if isinstance(value, list):
        items = [usage_shape(v, keep, (*path, i)) for i, v in enumerate(value)]
        return items if any(i is not None for i in items) else None
    return None


def only_usage(value: Any) -> Any:
    return usage_shape(value)


def gauges_in(value: Any, path: tuple = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """((path..., gauge name), value) of every gauge in a record or a usage shape."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == USAGE and isinstance(item, dict):
                for name, gauge in item.items():
                    yield (*path, name), gauge
            elif key != USAGE:
                yield from gauges_in(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from gauges_in(item, (*path, index))


class Diff:
    """What turns one record's content into another's (both without usage): paths to set,
    paths to remove, and list splices. Objects are followed by key and lists by position,
    down to MAX_DEPTH; a list whose length changed becomes one splice (the run between its
    equal head and tail); below MAX_DEPTH, or where the kind differs, a part is set whole."""

    def __init__(self, old: Any, new: Any):
        self.sets: list[list[Any]] = []
        self.unsets: list[list[Any]] = []
        self.splices: list[tuple[list[Any], int, int, int]] = []  # path, start, removed, end in new
        self._walk(old, new, ())

    def _walk(self, old: Any, new: Any, path: tuple[Any, ...]) -> None:
        if old == new:
            return
        deeper = len(path) < MAX_DEPTH
        if deeper and isinstance(old, dict) and isinstance(new, dict):
            for key, value in new.items():
                if key in old:
                    self._walk(old[key], value, (*path, key))
                else:
                    self.sets.append([*path, key])
            self.unsets += [[*path, key] for key in old if key not in new]
        elif deeper and path and isinstance(old, list) and isinstance(new, list):
            if len(old) == len(new):
                for index, (a, b) in enumerate(zip(old, new, strict=True)):
                    self._walk(a, b, (*path, index))
                return
            head = 0
            while head < min(len(old), len(new)) and old[head] == new[head]:
                head += 1
            tail = 0
            while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
                tail += 1
            self.splices.append((list(path), head, len(old) - head - tail, len(new) - tail))
        else:
            self.sets.append(list(path))

    def record(self, sections: dict[str, Any]) -> dict[str, Any]:
        """The `set`, `unset` and `splice` of a changes record, values from `sections`."""
        out: dict[str, Any] = {}
        if self.sets:
            out["set"] = [[path, value_at(sections, path)] for path in self.sets]
        if self.unsets:
            out["unset"] = self.unsets
        if self.splices:
            out["splice"] = [
                [path, start, removed, value_at(sections, path)[start:end]]
                for path, start, removed, end in self.splices
            ]
        return out


def value_at(record: Any, path: list[Any]) -> Any:
    for step in path:
        record = record[step]
    return record


def sections_from(
    results: dict[str, ProbeResult], last_good: dict[str, Any], timeouts: dict[str, float]
) -> dict[str, Any]:
    """Each section from its probe; a failed or overrun probe keeps its last good data
    (marked stale in probes.<name>) so a hung engine does not look like an empty one."""
    sections: dict[str, Any] = {}
    probes: dict[str, Any] = {}
    for name, result in results.items():
        summary = result.summary(timeouts[name])
        if result.status == OK:
            last_good[name] = result.data
        elif name in last_good:
            summary["stale"] = True
        sections[name] = last_good.get(name)
        probes[name] = summary
    sections["probes"] = probes
    return sections


class RecordEmitter:
    """Decides full, changes or unchanged, and which gauges go; remembers only what was
    actually handed to the outbox. `changes` (the backend accepts changes records and
    partial gauges) is set each round from what the backend said; without it, the previous
    protocol: a full record on every change, an unchanged one with every gauge. With `kept`
    (HeldFile), what the receiver holds survives a restart: the chain goes on after it."""

    def __init__(
        self, full_refresh_s: float = FULL_REFRESH_S, usage_refresh_s: float = 0.0, kept: HeldFile | None = None
    ):
        self.full_refresh_s = full_refresh_s
        self.usage_refresh_s = usage_refresh_s  # also the gauge age
        self.changes = False
        self.full_wanted = False  # the backend asked for a full record
        self.last_hash: str | None = None
        self.last_full_at: float | None = None
        self._last_sent_at: float | None = None
        self._held: dict[str, Any] | None = None  # the content the receiver holds after our last record
        self._built: dict[str, Any] | None = None
        self._gauges: dict[tuple[Any, ...], tuple[Any, float]] = {}  # (path, name) -> (value sent, when)
        self.kept = kept
        self.heard = True  # the backend's `accepts` are known in this run (set each round)
        earlier = kept.load() if kept is not None else None
        self._resumed = earlier is not None  # the chain of an earlier run, nothing sent yet in this one
        if earlier is not None:
            self._held, self.last_hash, self.last_full_at = earlier

    def build(self, sections: dict[str, Any], now: float | None = None) -> dict[str, Any] | None:
        """The record to send, or None: unchanged, and no gauge is due; or an earlier run's chain
        waits for this run's first `hello` (whether the backend still takes changes records)."""
        if self.waiting():
            return None
        now = time.time() if now is None else now
        self._built = sections
        digest = content_hash(sections)
        head = {"schema": SCHEMA_VERSION, "hash": digest, "collected_at": now}
        due = self.last_full_at is None or now - self.last_full_at >= self.full_refresh_s or self.full_wanted
        if due or self._held is None or (digest != self.last_hash and not self.changes):
            return {**head, "type": FULL, **sections}
        if not self.changes:
            if self._last_sent_at is not None and now - self._last_sent_at < self.usage_refresh_s:
                return None
            return {**head, "type": UNCHANGED, USAGE: only_usage(sections) or {}}
        parts: dict[str, Any] = {}
        if digest != self.last_hash:
            parts = Diff(without_usage(self._held), without_usage(sections)).record(sections)
        sent = self._gauges
        for path, start, removed, items in parts.get("splice", ()):
            sent = spliced(sent, tuple(path), start, removed, len(items))  # compare items where they are now
        gauges = usage_shape(
            sections, lambda path, name, value: self._gauge_due(sent.get((*path, name)), name, value, now)
        )
        if parts:
            record = {**head, "type": CHANGES, "base": self.last_hash, **parts}
            return {**record, USAGE: gauges} if gauges else record
        return {**head, "type": UNCHANGED, USAGE: gauges} if gauges else None

    def waiting(self) -> bool:
        """An earlier run's chain waits for this run's first `hello` (see build)."""
        return self._resumed and not self.heard

    def _gauge_due(self, sent: tuple[Any, float] | None, name: str, value: Any, now: float) -> bool:
        return sent is None or now - sent[1] >= self.usage_refresh_s or moved(name, sent[0], value)

    def sent(self, data: dict[str, Any]) -> None:
        self._resumed = False
        now = data["collected_at"]
        self.last_hash = data["hash"]
        self._last_sent_at = now
        if data["type"] == FULL:
            self.last_full_at = now
            self.full_wanted = False
            self._held = content(data)
            self._gauges = {}
            self._note_gauges(gauges_in(self._held), now)
        elif data["type"] == CHANGES and self._built is not None:
            self._held = self._built  # the receiver's content now hashes as ours
        if data["type"] != UNCHANGED and self.kept is not None and self._held is not None:
            self.kept.save(self._held, data["hash"], self.last_full_at)
        for path, value in data.get("set") or ():
            self._note_gauges(gauges_in(value, tuple(path)), now)
        for path, start, removed, items in data.get("splice") or ():
            self._gauges = spliced(self._gauges, tuple(path), start, removed, len(items))
            for index, item in enumerate(items, start):
                self._note_gauges(gauges_in(item, (*path, index)), now)
        self._note_gauges(gauges_in(data.get(USAGE) or {}), now)

    def _note_gauges(self, gauges: Iterator[tuple[tuple[Any, ...], Any]], now: float) -> None:
        for key, value in gauges:
            self._gauges[key] = (value, now)


class HeldFile:
    """What the receiver holds after the last durable record (inventory-held.json in the state
    directory: content, hash, when the last full record went), replaced atomically after each
    full or changes record is in the outbox. A file that does not hash to its own `hash` is not
    used (a full record follows: nothing is lost); one that cannot be written is tried again."""

    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / HELD_FILE
        self.problem: str | None = None  # the last write's failure, until one succeeds

    def load(self) -> tuple[dict[str, Any], str, float | None] | None:
        try:
            with open(self.path, "rb") as fh:
                raw = fh.read(MAX_HELD_BYTES + 1)
            data = orjson.loads(raw) if len(raw) <= MAX_HELD_BYTES else None
        except (OSError, orjson.JSONDecodeError):
            return None
        if not isinstance(data, dict) or data.get("version") != 1 or not isinstance(data.get("held"), dict):
            return None
        full_at = data.get("last_full_at")
        if content_hash(data["held"]) != data.get("hash") or not isinstance(full_at, int | float | None):
            return None
        return data["held"], data["hash"], full_at

    def save(self, held: dict[str, Any], digest: str, last_full_at: float | None) -> None:
        body = orjson.dumps({"version": 1, "hash": digest, "last_full_at": last_full_at, "held": held})
        if len(body) > MAX_HELD_BYTES:
            self.forget()  # a record this big starts a new chain at the next start
            return
        try:
            replace_file(self.path, body, fsync=False)  # a file lost with a crash means one full record
        except OSError as exc:
            if self.problem is None:
                log.warning("inventory chain not kept (%s): a restart sends a full record", exc.strerror or exc)
            self.problem = exc.strerror or str(exc)
            return
        self.problem = None

    def forget(self) -> None:
        try:
            self.path.unlink()
        except OSError:
            pass


def spliced(
    gauges: dict[tuple[Any, ...], Any], path: tuple[Any, ...], start: int, removed: int, added: int
) -> dict[tuple[Any, ...], Any]:
    """The gauges sent, after a splice of the list at `path`: those of the items it removed
    are gone, those after it moved with their items."""
    depth, out = len(path), {}
    for key, sent in gauges.items():
        index = key[depth] if len(key) > depth and key[:depth] == path else None
        if type(index) is not int or index < start:
            out[key] = sent
        elif index >= start + removed:
            out[(*path, index + added - removed, *key[depth + 1 :])] = sent
    return out


def full_record_id(data: dict[str, Any]) -> str:
    """Names the state and the moment: a retried write of the same record dedups."""
    return f"inv:{data['hash'][:16]}:{int(data['collected_at'] * 1000)}"
