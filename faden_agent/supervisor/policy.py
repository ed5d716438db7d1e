"""When a failed worker may start again: exponential backoff with jitter, and a
restart-intensity limit (Erlang/OTP): more than `max_restarts` exits within `window_s`
makes the worker FATAL, retried after `fatal_retry_s` (a host agent never gives up).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import NamedTuple

from faden_agent.common.backoff import ceiling


class RestartPolicy(NamedTuple):
    backoff_min_s: float
    backoff_max_s: float
    max_restarts: int
    window_s: float
    fatal_retry_s: float
    jitter: float = 0.2  # +-20 %: workers that died together do not restart in lockstep

    def recent_exits(self, exit_times: Iterable[float], now: float) -> int:
        return sum(1 for t in exit_times if now - t <= self.window_s)

    def is_fatal(self, exit_times: Iterable[float], now: float) -> bool:
        return self.recent_exits(exit_times, now) > self.max_restarts

    def backoff(self, exit_times: Iterable[float], now: float, rng: random.Random | None = None) -> float:
        recent = max(1, self.recent_exits(exit_times, now))
        if recent == 1:
            return 0.0  # a lone failure restarts at once (Erlang's way); the ladder starts at the second
        base = ceiling(recent - 2, self.backoff_min_s, self.backoff_max_s)
        spread = (rng or random).uniform(1 - self.jitter, 1 + self.jitter)
        return min(self.backoff_max_s, base * spread)
