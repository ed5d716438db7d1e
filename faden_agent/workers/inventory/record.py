"""One inventory record from the probes' results, and when to send it in full.
Notes (why, figures, history): docs/design-notes.md.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import orjson

from faden_agent.protocol.inventory import FULL, UNCHANGED, USAGE
from faden_agent.workers.inventory.probes import OK, ProbeResult

SCHEMA_VERSION = 1
SECTIONS = ("host", "disks", "network", "docker", "gpu")
FULL_REFRESH_S = 3600.0


def without_usage(value: Any) -> Any:
    """The value with every "usage" object left out, at any depth."""
    if isinstance(value, dict):
        return {k: without_usage(v) for k, v in value.items() if k != USAGE}
    if isinstance(value, list):
        return [without_usage(v) for v in value]
    return value


def only_usage(value: Any) -> Any:
    """The "usage" objects alone, in the shape of the full record: dicts by key, lists by
    position (aligned with the full record of the same hash); None where there is none."""
    if isinstance(value, dict):
        out = {k: (v if k == USAGE else only_usage(v)) for k, v in value.items()}
        out = {k: v for k, v in out.items() if v is not None}
        return out or None
    if isinstance(value, list):
        items = [only_usage(v) for v in value]
        return items if any(i is not None for i in items) else None
    return None


def content_hash(sections: dict[str, Any]) -> str:
    canonical = orjson.dumps(without_usage(sections), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()[:32]


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
    """Decides full or unchanged; remembers only what was actually handed to the outbox."""

    def __init__(self, full_refresh_s: float = FULL_REFRESH_S, usage_refresh_s: float = 0.0):
        self.full_refresh_s = full_refresh_s
        self.usage_refresh_s = usage_refresh_s
        self.last_hash: str | None = None
        self._last_full_at: float | None = None
        self._last_sent_at: float | None = None

    def build(self, sections: dict[str, Any], now: float | None = None) -> dict[str, Any] | None:
        """The record to send, or None: unchanged, and the gauges are not due yet."""
        now = time.time() if now is None else now
        digest = content_hash(sections)
        head = {"schema": SCHEMA_VERSION, "hash": digest, "collected_at": now}
        due = self._last_full_at is None or now - self._last_full_at >= self.full_refresh_s
        if digest != self.last_hash or due:
            return {**head, "type": FULL, **sections}
        if self._last_sent_at is not None and now - self._last_sent_at < self.usage_refresh_s:
            return None
        return {**head, "type": UNCHANGED, USAGE: only_usage(sections) or {}}

    def sent(self, data: dict[str, Any]) -> None:
        self.last_hash = data["hash"]
        self._last_sent_at = data["collected_at"]
        if data["type"] == FULL:
            self._last_full_at = data["collected_at"]


def full_record_id(data: dict[str, Any]) -> str:
    """Names the state and the moment: a retried write of the same record dedups."""
    return f"inv:{data['hash'][:16]}:{int(data['collected_at'] * 1000)}"
