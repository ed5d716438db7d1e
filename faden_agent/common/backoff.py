"""How long to wait before trying again: one answer for every retry loop of the agent.

delay(n) is uniform in [max(min, ceiling(n) * (1 - jitter)), ceiling(n)], ceiling(n) = min * 2**n
capped at max: never below min (no busy loop). A server's Retry-After wins, capped at
MAX_RETRY_AFTER_S (parse_retry_after reads the header). The supervisor's restart policy uses ceiling.
"""

from __future__ import annotations

import math
import random
import time

MAX_RETRY_AFTER_S = 3600.0
_MAX_DOUBLINGS = 32  # 2**32 * any sane minimum is far past any maximum: no float overflow


def ceiling(attempt: int, min_s: float, max_s: float) -> float:
    """The exponential bound of attempt n (from 0): min * 2**n, at most max."""
    return min(max_s, min_s * (2 ** min(max(attempt, 0), _MAX_DOUBLINGS)))


def delay(attempt: int, min_s: float, max_s: float, jitter: float = 1.0, rng: random.Random | None = None) -> float:
    """Wait n (from 0): 1.0 is full jitter, 0.5 the upper half, 0.0 exactly the ceiling."""
    cap = ceiling(attempt, min_s, max(min_s, max_s))
    return (rng or random).uniform(max(min_s, cap * (1.0 - jitter)), cap)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date), at most
    MAX_RETRY_AFTER_S; None when absent or unreadable ("inf", "nan", garbage)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            import email.utils  # an HTTP date is rare; the module costs every worker's start

            seconds = email.utils.parsedate_to_datetime(value).timestamp() - (time.time() if now is None else now)
        except (TypeError, ValueError, OverflowError):
            return None
    return capped_retry_after(seconds)


def capped_retry_after(seconds: float | None) -> float | None:
    """A server-told wait made safe: None when unusable, else within [0, MAX_RETRY_AFTER_S]."""
    if seconds is None or not math.isfinite(seconds):
        return None  # Event.wait(inf) raises OverflowError in the waiting thread
    return min(max(0.0, seconds), MAX_RETRY_AFTER_S)


class Backoff:
    """Successive delays of one retry loop; reset() after a success."""

    def __init__(self, min_s: float, max_s: float, rng: random.Random | None = None, jitter: float = 1.0):
        self.min_s, self.max_s = min_s, max(min_s, max_s)
        self.jitter = jitter
        self.attempt = 0
        self._rng = rng or random.Random()

    def next_delay(self, retry_after: float | None = None) -> float:
        """The next wait: the server's Retry-After when it sent a usable one, else delay()."""
        attempt, self.attempt = self.attempt, self.attempt + 1
        told = capped_retry_after(retry_after)
        if told is not None:
            return told
        return delay(attempt, self.min_s, self.max_s, self.jitter, self._rng)

    def reset(self) -> None:
        self.attempt = 0
