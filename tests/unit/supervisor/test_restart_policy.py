"""The supervisor's restart policy (supervisor/policy.py): the first failure restarts at once,
repeated ones back off doubling to a cap, exits age out, too many make FATAL, jitter spreads."""

from __future__ import annotations

import random

from faden_agent.supervisor.policy import RestartPolicy

POLICY = RestartPolicy(backoff_min_s=0.5, backoff_max_s=8, max_restarts=3, window_s=60, fatal_retry_s=300, jitter=0)


def test_first_failure_restarts_at_once_repeated_ones_double_and_are_capped():
    delays = [POLICY.backoff([0.0] * n, now=1.0) for n in range(1, 8)]
    assert delays == [0, 0.5, 1, 2, 4, 8, 8]


def test_backoff_shrinks_as_exits_age_out():
    # exits long ago no longer count: a lone failure restarts at once again, a second waits the minimum
    assert POLICY.backoff([0.0, 10.0, 1000.0], now=1000.5) == 0
    assert POLICY.backoff([0.0, 10.0, 999.0, 1000.0], now=1000.5) == 0.5


def test_intensity_limit_makes_fatal():
    assert not POLICY.is_fatal([1, 2, 3], now=10)
    assert POLICY.is_fatal([1, 2, 3, 4], now=10)
    assert not POLICY.is_fatal([1, 2, 3, 4], now=100)  # outside the window


def test_jitter_spreads_restarts():
    policy = RestartPolicy(0.5, 8, 3, 60, 300, jitter=0.2)
    rng = random.Random(7)
    values = {round(policy.backoff([0.0, 0.5], 1.0, rng), 4) for _ in range(20)}
    assert len(values) > 10
    assert all(0.4 <= v <= 0.6 for v in values)
