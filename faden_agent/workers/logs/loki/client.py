"""Loki pushes: the JSON body (loki/proto.py makes the protobuf one) and the delivery policy
(docs/logs.md): one stream per push (Loki answers for its last stream only); 2xx accepted;
a 400 naming lines is final, one refusing the whole push is resent in the plain form or split;
413 split; 401/403 retried slowly with a clear status; 429 retried after half a second,
doubling, split when it persists; else the reconnect backoff (Retry-After wins).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from operator import attrgetter

import orjson

from faden_agent.common import backoff
from faden_agent.protocol.histogram import Histogram
from faden_agent.workers.logs.entry import Entry, Labels
from faden_agent.workers.logs.loki import proto as lokiproto
from faden_agent.workers.logs.loki.destinations import Answer
from faden_agent.workers.logs.loki.proto import ProtoEncoder
from faden_agent.workers.logs.sources import source_kind
from faden_agent.workers.logs.stamps import parse_rfc3339_ns

LOKI_MAX_WAIT_S = 600.0  # Loki's Retry-After, capped lower than backoff.MAX_RETRY_AFTER_S: never park the shipper long
STRUCTURED_METADATA_MODES = ("auto", "on", "off")
# 401/403: a multi-tenant Loki without X-Scope-OrgID ("no org id"), or a wrong key.
AUTH_REFUSALS = (401, 403)
AUTH_HINT = "a multi-tenant Loki needs FADEN_NODE_AGENT_LOKI_TENANT, or check the credentials in the URL"
MAX_PUSHES_IN_FLIGHT = 4  # pushes sent before the first of them is answered (shipper.py)
# A 429 without Retry-After (Loki sends none): the first wait, doubling (Promtail's min_period).
# Loki's limiter refills while we wait: the reconnect backoff's seconds let its bucket
# overflow, wasting what the tenant may send, and hold every push in flight that long.
RATE_LIMITED_MIN_S = 0.5
# A push still answered 429 after this many tries (0.5 + 1 + 2 s of waits, Loki's bucket
# refilling meanwhile) may be larger than the tenant's burst, which never passes: split it.
RATE_LIMITED_SPLIT_AFTER = 4
# Loki's own wording (2.8 and 3.x) of a 400 about single lines, at the start of its answer;
# a decode error quotes our body, so the match is anchored to Loki's sentence, not anywhere.
# This and the expressions below read a refusal only: text, compiled by `re` at first use.
PER_LINE_REFUSAL = (
    r"(?s)(entry for stream '.*' has timestamp too (old|new)"
    r"|Max entry size '\d+' bytes exceeded"
    r"|entry with timestamp .* ignored, reason: 'entry (out of order|too far behind)"
    r"|.*total ignored: \d+ out of \d+)"
)
log = logging.getLogger(__name__)


def encode(entries: list[Entry], with_metadata: bool = True) -> bytes:
    """{"streams": [{"stream": labels, "values": [[ns string, line, metadata?], ...]}]}, in order.
    Without metadata, an entry's detail is kept in its line (entry.with_detail)."""
    return orjson.dumps(
        {
            "streams": [
                {"stream": dict(part[0].stream), "values": _values(part, with_metadata)} for part in by_stream(entries)
            ]
        }
    )


def _values(entries: list[Entry], with_metadata: bool) -> list[tuple]:
    """One stream's values (tuples: orjson writes them as arrays, and they cost less than lists)."""
    if with_metadata:
        return [(str(e.ts_ns), e.line, e.metadata) if e.metadata else (str(e.ts_ns), e.line) for e in entries]
    return [(str(e.ts_ns), e.with_detail()) if e.metadata else (str(e.ts_ns), e.line) for e in entries]


# Numbers of at most 18 digits: a longer run is no count Loki writes (and int() of one is slow).
_TOTAL_IGNORED = r"total ignored: (\d{1,18}) out of \d"
_OLDEST_ACCEPTABLE = r"oldest acceptable timestamp is: (\S+?Z)"
_TOO_NEW = r"has timestamp too new: (\S+?Z)"
_MAX_ENTRY_SIZE = r"Max entry size '(\d{1,18})' bytes exceeded"


def refused_count(detail: str, entries: list[Entry]) -> int:
    """How many of the batch's lines a per-line 400 refused, from Loki's words: the number it
    ignored, or the lines its limit condemns (older than the oldest acceptable timestamp, at
    least as new as the too-new one it quotes, longer than the entry size). Loki quotes times
    to the second, so this counts the lines surely refused: at least one, at most the batch;
    the whole batch when the words give no measure."""
    if (ignored := re.search(_TOTAL_IGNORED, detail)) is not None:
        return max(1, min(int(ignored[1]), len(entries)))
    measures = []
    if (oldest_ns := _quoted_time_ns(_OLDEST_ACCEPTABLE, detail)) is not None:
        measures.append(lambda e: e.ts_ns < oldest_ns)
    if (newest_ns := _quoted_time_ns(_TOO_NEW, detail)) is not None:
        measures.append(lambda e: e.ts_ns >= newest_ns)
    if (size := re.search(_MAX_ENTRY_SIZE, detail)) is not None:
        limit = int(size[1])
        measures.append(lambda e: len(e.line) > limit // 4 and len(e.line.encode("utf-8", "surrogatepass")) > limit)
    if not measures:
        return len(entries)
    refused = sum(1 for e in entries if any(m(e) for m in measures))
    return max(1, min(refused, len(entries)))


def _quoted_time_ns(pattern: str, detail: str) -> int | None:
    """The time Loki quotes where `pattern` finds it (RFC 3339, to the second); None: no time."""
    found = re.search(pattern, detail)
    return None if found is None else parse_rfc3339_ns(found[1].encode())


def names_single_lines(detail: str) -> bool:
    """Whether a 400's text is Loki's answer about single lines (the rest was stored)."""
    return re.match(PER_LINE_REFUSAL, detail) is not None


def by_stream(entries: list[Entry]) -> list[list[Entry]]:
    """The entries of each stream, in order, streams in the order they first appear."""
    streams = list(map(_STREAM, entries))
    if not streams or streams.count(streams[0]) == len(streams):  # the usual batch: one stream (a C loop)
        return [entries] if entries else []
    parts: dict[Labels, list[Entry]] = {}
    for entry in entries:
        parts.setdefault(entry.stream, []).append(entry)
    return list(parts.values())


_STREAM = attrgetter("stream")


class Outcome:
    __slots__ = ("accepted", "rejected", "dropped", "sources")

    def __init__(
        self, accepted: int = 0, rejected: int = 0, dropped: int = 0, sources: dict[str, list[int]] | None = None
    ) -> None:
        self.accepted = accepted  # lines in 2xx-answered pushes
        # lines in pushes Loki refused in part (400 naming lines) or single lines refused whole
        self.rejected = rejected
        self.dropped = dropped  # single lines answered 413
        # source kind -> [accepted, rejected, dropped] (Pusher.push: one stream is one source)
        self.sources: dict[str, list[int]] = {} if sources is None else sources

    def of_source(self, kind: str) -> Outcome:
        """The same counts, all of the source `kind`."""
        counts = [self.accepted, self.rejected, self.dropped]
        return Outcome(self.accepted, self.rejected, self.dropped, {kind: counts})

    def __iadd__(self, other: Outcome) -> Outcome:
        self.accepted += other.accepted
        self.rejected += other.rejected
        self.dropped += other.dropped
        for kind, counts in other.sources.items():
            mine = self.sources.setdefault(kind, [0, 0, 0])
            for i, n in enumerate(counts):
                mine[i] += n
        return self


class Pusher:
    def __init__(
        self,
        target,
        backoff_min_s: float,
        backoff_max_s: float,
        sleep: Callable[[float], bool],
        structured_metadata: str = "auto",
    ):
        """`sleep(seconds)` waits and returns True when the worker is stopping."""
        if structured_metadata not in STRUCTURED_METADATA_MODES:
            raise ValueError(f"structured_metadata must be one of {STRUCTURED_METADATA_MODES}")
        self.target = target
        self.backoff_min_s = backoff_min_s
        self.backoff_max_s = backoff_max_s
        self.sleep = sleep
        self.mode = structured_metadata
        self.plain_target: str | None = None  # the target that refused structured metadata (auto mode)
        self.metadata_target: str | None = None  # the target that stored a JSON push with structured metadata
        self.proto = ProtoEncoder()
        self.last_error = ""
        self.last_rejection = ""  # Loki's words for the last lines it refused
        self.retries = 0
        self.retries_by_status: dict[str, int] = {}  # "429", "5xx", "4xx", "no_answer": bounded
        self.bytes_pushed = 0
        self.push_seconds = Histogram()
        self.hold_until = 0.0  # monotonic time before which no push is sent (a retry delay)

    @property
    def with_metadata(self) -> bool:
        """The form the next push takes: structured metadata unless switched off or this target refused it."""
        if self.mode == "off":
            return False
        return self.mode == "on" or self.plain_target != str(self.target)

    def push(self, entries: list[Entry], with_metadata: bool | None = None) -> Outcome | None:
        """Deliver the batch, one push per stream (see above), each by the policy above;
        None when stopping before it was done."""
        outcome = Outcome()
        for part in by_stream(entries):
            result = self._push_stream(part, with_metadata)
            if result is None:
                return None
            outcome += result.of_source(source_kind(part[0].source))
        return outcome

    def _push_stream(self, entries: list[Entry], with_metadata: bool | None) -> Outcome | None:
        attempt = 0
        encoded: tuple[bool, bool, bytes] | None = None  # a retry of the same form sends the same bytes
        while True:
            metadata = self.with_metadata if with_metadata is None else with_metadata
            metadata = metadata and any(entry.metadata for entry in entries)
            if self._wait_for_hold():
                return None
            # Protobuf where the target takes it; with metadata only once a JSON push with
            # metadata was stored there (Loki 2.8 drops protobuf metadata without a word).
            native = self.target.takes_protobuf and (not metadata or self.metadata_target == str(self.target))
            if encoded is None or encoded[:2] != (native, metadata):
                body = self.proto.encode([entries], metadata) if native else encode(entries, metadata)
                encoded = (native, metadata, body)
            payload = encoded[2]
            started = time.monotonic()
            if native:
                answer = self.target.send(payload, lokiproto.CONTENT_TYPE)
            else:
                answer = self.target.send(payload)
            self.push_seconds.observe(time.monotonic() - started)
            self.bytes_pushed += len(payload)
            if answer.ok:
                self._recovered(attempt)
                if metadata and not native:
                    self.metadata_target = str(self.target)
                return Outcome(accepted=len(entries))
            if answer.status == 400:
                self._recovered(attempt)
                if names_single_lines(answer.detail):
                    return self._rejected(entries, answer.detail)
                if metadata:
                    self._refused_metadata(answer.detail)
                    with_metadata = False
                    continue
                if len(entries) == 1:
                    return self._rejected(entries, answer.detail, whole=True)
                log.warning(
                    "logs: Loki refused a whole push of %d lines (400: %s); splitting it",
                    len(entries),
                    answer.detail[:200],
                )
                return self._split(entries, with_metadata=False)
            if answer.status == 413:
                if len(entries) == 1:
                    log.warning("logs: Loki refused a single line as too large (413); dropped it")
                    return Outcome(dropped=1)
                return self._split(entries, with_metadata)
            attempt += 1
            self.retries += 1
            status = answer.status or 0
            kind = "no_answer" if not status else str(status) if status == 429 else f"{status // 100}xx"
            self.retries_by_status[kind] = self.retries_by_status.get(kind, 0) + 1
            delay = self._delay(answer, attempt)
            # Every push in flight waits it out, not only this one: four pushes retrying
            # on their own would spend Loki's rate limit on lines it already stored.
            self.hold_until = max(self.hold_until, time.monotonic() + delay)
            if status == 429 and attempt >= RATE_LIMITED_SPLIT_AFTER and len(entries) > 1:
                log.warning("logs: Loki kept refusing a push of %d lines (429); splitting it", len(entries))
                return self._split(entries, with_metadata)  # each half waits the hold first
            if self.sleep(max(0.0, self.hold_until - time.monotonic())) or self._wait_for_hold():
                return None

    def _wait_for_hold(self) -> bool:
        """Wait until no retry delay stands; True when stopping."""
        while (left := self.hold_until - time.monotonic()) > 0:
            if self.sleep(left):
                return True
        return False

    def _refused_metadata(self, detail: str) -> None:
        self.metadata_target = None
        if self.mode == "auto" and self.plain_target != str(self.target):
            self.plain_target = str(self.target)
            log.warning(
                "logs: %s refused a push with structured metadata (400: %s); pushing the plain form "
                "there from now on, the detail kept in the line",
                self.target,
                detail[:200],
            )

    def _rejected(self, entries: list[Entry], detail: str, whole: bool = False) -> Outcome:
        refused = len(entries) if whole else refused_count(detail, entries)
        self.last_rejection = detail[:300]
        log.warning(
            "logs: Loki rejected %d lines of a batch of %d (400, not resent): %s", refused, len(entries), detail[:200]
        )
        return Outcome(accepted=len(entries) - refused, rejected=refused)

    def _split(self, entries: list[Entry], with_metadata: bool | None) -> Outcome | None:
        outcome = Outcome()
        half = len(entries) // 2
        for part in (entries[:half], entries[half:]):  # in order: streams keep their order
            result = self._push_stream(part, with_metadata)
            if result is None:
                return None
            outcome += result
        return outcome

    def _delay(self, answer: Answer, attempt: int) -> float:
        reason = f"HTTP {answer.status}" if answer.status else "no answer"
        self.last_error = f"{reason}: {answer.detail}"[:300]
        if answer.status in AUTH_REFUSALS:
            # Nothing changes until someone fixes the tenant or the key: say so, ask rarely.
            self.last_error = f"{reason}: Loki refused who we are ({AUTH_HINT}): {answer.detail}"[:300]
            if attempt == 1:
                log.error(
                    "logs: push to %s refused: %s; retrying every %gs", self.target, self.last_error, self.backoff_max_s
                )
            return backoff.delay(64, self.backoff_min_s, self.backoff_max_s, jitter=0.5)  # at the ceiling: [max/2, max]
        if attempt == 1:
            log.warning("logs: push to %s failed (%s); retrying until it works", self.target, self.last_error)
        if answer.retry_after is not None:
            return min(answer.retry_after, LOKI_MAX_WAIT_S)
        min_s = RATE_LIMITED_MIN_S if answer.status == 429 else self.backoff_min_s
        return backoff.delay(attempt - 1, min_s, self.backoff_max_s, jitter=0.5)

    def _recovered(self, attempt: int) -> None:
        if attempt:
            log.info("logs: push to %s works again after %d retries", self.target, attempt)
        self.last_error = ""
