"""Captures (node/captures.py) to Loki: each waiting capture is one entry, its JSON line as is,
labelled as its container's lines are with source="capture"; once Loki took it, its file is
removed. The reader waits for the worker's tick to see the directory change (one stat a
tick): idle, it costs no wake-up. A capture file it cannot read is removed and counted lost."""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING

import orjson

from faden_agent.node import captures
from faden_agent.workers.logs.entry import Entry, clean_line
from faden_agent.workers.logs.sources import CAPTURES, Shared, Source

if TYPE_CHECKING:
    from faden_agent.protocol.status import SourceStatus

SHIPPED = "shipped"  # a capture's position once Loki took it
log = logging.getLogger(__name__)


class CapturesSource(Source):
    kind = CAPTURES.name

    def __init__(self, shared: Shared):
        super().__init__(shared)
        self.state_dir = shared.config.state_dir
        self.wake = threading.Event()
        self.queued: set[str] = set()  # in the backlog or in a push, not yet taken by Loki
        self._seen: int | None = None  # the directory's mtime at the last look
        self.shipped = 0

    def check(self) -> None:
        super().check()
        try:
            seen: int | None = os.stat(captures.directory(self.state_dir)).st_mtime_ns
        except OSError:
            seen = None
        if seen != self._seen or self.queued:
            self._seen = seen
            self.wake.set()

    def follow(self) -> None:
        while not self.stop_event.is_set():
            self.wake.wait()
            self.wake.clear()
            if not self.stop_event.is_set():
                self.ship_waiting()

    def ship_waiting(self) -> None:
        """Each waiting capture into the backlog once; those Loki took removed."""
        for capture_id in captures.waiting(self.state_dir):
            key = f"{CAPTURES.key_prefix}:{capture_id}"
            if self.positions.get(key) == SHIPPED:
                captures.remove(self.state_dir, capture_id)
                self.positions.forget(key)
                self.queued.discard(capture_id)
                self.shipped += 1
                continue
            if capture_id in self.queued:
                continue
            entry = self._entry(capture_id, key)
            if entry is None:
                continue
            if not self.backlog.put(entry):
                return  # closed: the worker stops
            self.lines_read += 1
            self.queued.add(capture_id)

    def _entry(self, capture_id: str, key: str) -> Entry | None:
        try:
            line = captures.read(self.state_dir, capture_id)
            document = orjson.loads(line)
            container = document["container"]
            stream = self.labels.capture(str(container["name"]), container.get("cluster"), container.get("workload"))
            stamp = int(float(document["time"]) * 1e9)
        except (OSError, ValueError, KeyError, TypeError, orjson.JSONDecodeError) as exc:
            log.error("logs: capture %s unreadable (%s); removed", capture_id, str(exc)[:200])
            captures.remove(self.state_dir, capture_id)
            self.lost(1, "unreadable_capture")
            return None
        return Entry(stream, stamp, clean_line(line), None, key, SHIPPED)

    def stop(self) -> None:
        self.wake.set()

    def status(self) -> SourceStatus:
        return {**super().status(), "shipped": self.shipped, "queued": len(self.queued)}
