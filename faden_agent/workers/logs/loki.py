"""Loki pushes: the body (Loki's JSON push format) and the delivery policy.

Policy, per batch (docs/logs.md):
- 2xx: accepted.
- 400: final. Loki stored the valid lines and names the bad ones; resending would not
  help, so the batch counts as done and its lines as rejected. (One exception: a Loki that
  refuses structured metadata gets the same lines again without it, once, and never again.)
- 413: split in halves, push each in order; a single line answered 413 is dropped and counted.
- anything else (connection error, 408, 429, 5xx, an auth or routing 4xx): retry with
  exponential backoff and jitter, or exactly Retry-After when given, for as long as it
  takes. The sources are not read meanwhile (the backlog is full), so nothing is lost.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from faden_agent.workers.logs.entry import Entry, Labels
from faden_agent.workers.logs.targets import Answer

MAX_RETRY_AFTER_SEC = 600.0  # a broken header must not park the shipper for a day
log = logging.getLogger(__name__)


def encode(entries: list[Entry], with_metadata: bool = True) -> bytes:
    """{"streams": [{"stream": labels, "values": [[ns string, line, metadata?], ...]}]}, in order."""
    streams: dict[Labels, list[list[object]]] = {}
    for entry in entries:
        values = streams.get(entry.stream)
        if values is None:
            values = streams[entry.stream] = []
        if with_metadata and entry.metadata:
            values.append([str(entry.ts_ns), entry.line, entry.metadata])
        else:
            values.append([str(entry.ts_ns), entry.line])
    return orjson.dumps({"streams": [{"stream": dict(labels), "values": values} for labels, values in streams.items()]})


@dataclass
class Outcome:
    accepted: int = 0  # lines in 2xx-answered pushes
    rejected: int = 0  # lines in 400-answered pushes (Loki kept the valid ones)
    dropped: int = 0  # single lines answered 413

    def __iadd__(self, other: "Outcome") -> "Outcome":
        self.accepted += other.accepted
        self.rejected += other.rejected
        self.dropped += other.dropped
        return self


class Pusher:
    def __init__(self, target, backoff_min_s: float, backoff_max_s: float, sleep: Callable[[float], bool]):
        """`sleep(seconds)` waits and returns True when the worker is stopping."""
        self.target = target
        self.backoff_min_s = backoff_min_s
        self.backoff_max_s = backoff_max_s
        self.sleep = sleep
        self.with_metadata = True
        self.last_error = ""
        self.retries = 0

    def push(self, entries: list[Entry]) -> Outcome | None:
        """Deliver the batch by the policy above; None when stopping before it was done."""
        attempt = 0
        while True:
            answer = self.target.send(encode(entries, self.with_metadata))
            if answer.ok:
                self._recovered(attempt)
                return Outcome(accepted=len(entries))
            if answer.status == 400:
                if self.with_metadata and "structured metadata" in answer.detail.lower():
                    log.warning("logs: Loki refuses structured metadata; pushing without it from now on")
                    self.with_metadata = False
                    continue
                self._recovered(attempt)
                log.warning("logs: Loki rejected a batch of %d lines (400, not resent): %s", len(entries), answer.detail)
                return Outcome(rejected=len(entries))
            if answer.status == 413:
                return self._split(entries)
            attempt += 1
            self.retries += 1
            if self.sleep(self._delay(answer, attempt)):
                return None

    def _split(self, entries: list[Entry]) -> Outcome | None:
        if len(entries) == 1:
            log.warning("logs: Loki refused a single line as too large (413); dropped it")
            return Outcome(dropped=1)
        outcome = Outcome()
        half = len(entries) // 2
        for part in (entries[:half], entries[half:]):  # in order: streams keep their order
            result = self.push(part)
            if result is None:
                return None
            outcome += result
        return outcome

    def _delay(self, answer: Answer, attempt: int) -> float:
        reason = f"HTTP {answer.status}" if answer.status else "no answer"
        self.last_error = f"{reason}: {answer.detail}"[:300]
        if attempt == 1:
            log.warning("logs: push to %s failed (%s); retrying until it works", self.target, self.last_error)
        if answer.retry_after is not None:
            return min(answer.retry_after, MAX_RETRY_AFTER_SEC)
        ceiling = min(self.backoff_max_s, self.backoff_min_s * 2 ** min(attempt - 1, 30))
        return random.uniform(ceiling / 2, ceiling)  # jitter, but never a busy loop

    def _recovered(self, attempt: int) -> None:
        if attempt:
            log.info("logs: push to %s works again after %d retries", self.target, attempt)
        self.last_error = ""
