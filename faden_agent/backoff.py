"""How long to wait before trying again: one answer for every retry loop of the agent.

- ceiling(n): the exponential part, min * 2**n capped at max;
- Backoff: delay n (from 0) is uniform in [min, ceiling(n)] ("full jitter", floored at min
  so a retry loop is never a busy loop);
- a server's Retry-After wins over the backoff, capped at MAX_RETRY_AFTER_SEC so a broken or
  hostile header cannot park the agent for days (parse_retry_after reads the header).

Users: the stream worker's enrollment, downlink, uplink and heartbeat (through
workers/stream/link.py: wait_after), the log shipper's pushes, the supervisor's restarts.
"""

from __future__ import annotations

import email.utils
import math
import random
import time

MAX_RETRY_AFTER_SEC = 3600.0
_MAX_DOUBLINGS = 32  # 2**32 * any sane minimum is far past any maximum: no float overflow


def ceiling(attempt: int, min_s: float, max_s: float) -> float:
    """The exponential bound of attempt n (from 0): min * 2**n, at most max."""
    return min(max_s, min_s * (2 ** min(max(attempt, 0), _MAX_DOUBLINGS)))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date), at most
    MAX_RETRY_AFTER_SEC; None when absent or unreadable ("inf", "nan", garbage)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - (time.time() if now is None else now)
        except (TypeError, ValueError, OverflowError):
            return None
    return capped_retry_after(seconds)


def capped_retry_after(seconds: float | None) -> float | None:
    """A server-told wait made safe: None when unusable, else within [0, MAX_RETRY_AFTER_SEC]."""
    if seconds is None or not math.isfinite(seconds):
        return None  # Event.wait(inf) raises OverflowError in the waiting thread
    return min(max(0.0, seconds), MAX_RETRY_AFTER_SEC)


class Backoff:
    """Successive delays of one retry loop; reset() after a success."""

    def __init__(self, min_s: float, max_s: float, rng: random.Random | None = None):
        self.min_s, self.max_s = min_s, max(min_s, max_s)
        self.attempt = 0
        self._rng = rng or random.Random()

    def next_delay(self, retry_after: float | None = None) -> float:
        """The next wait: the server's Retry-After when it sent a usable one, else full jitter."""
        cap = ceiling(self.attempt, self.min_s, self.max_s)
        self.attempt += 1
        told = capped_retry_after(retry_after)
        if told is not None:
            return told
        return self._rng.uniform(self.min_s, cap)

    def reset(self) -> None:
        self.attempt = 0
