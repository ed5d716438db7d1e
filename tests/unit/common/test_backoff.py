"""faden_agent/common/backoff.py and the stream link's one rule for "wait how long"."""

from __future__ import annotations

import random
import threading

import pytest

from faden_agent.backend.client import (
    BackendUnavailable,
    CredentialRejected,
    Maintenance,
    MaintenanceHold,
    ProtocolError,
    TokenRefused,
)
from faden_agent.common.backoff import MAX_RETRY_AFTER_S, Backoff, capped_retry_after, ceiling, delay
from faden_agent.protocol.link import LinkState
from faden_agent.workers.stream.link import Gate, wait_after


def test_ceiling_doubles_from_min_to_max_and_never_overflows():
    assert [ceiling(n, 0.5, 8) for n in range(7)] == [0.5, 1, 2, 4, 8, 8, 8]
    assert ceiling(10**9, 0.5, 8) == 8 and ceiling(-3, 0.5, 8) == 0.5


def test_jitter_is_the_randomized_fraction_of_the_ceiling_never_below_min():
    rng = random.Random(7)
    assert [delay(n, 0.5, 10.0, jitter=0.0) for n in range(7)] == [0.5, 1, 2, 4, 8, 10, 10]  # plain doubling
    halves = [delay(4, 0.5, 100.0, jitter=0.5, rng=rng) for _ in range(200)]  # the log shipper's
    assert all(4.0 <= d <= 8.0 for d in halves) and max(halves) - min(halves) > 2.0
    full = [delay(4, 0.5, 100.0, rng=rng) for _ in range(200)]
    assert all(0.5 <= d <= 8.0 for d in full) and min(full) < 2.0
    assert delay(0, 0.5, 10.0, jitter=0.5) == 0.5  # the first wait: min, not half of it


def test_retry_after_wins_over_the_backoff_and_is_capped():
    backoff = Backoff(1.0, 2.0, rng=random.Random(3))
    assert backoff.next_delay(retry_after=30) == 30  # longer than max: the server decides
    assert backoff.next_delay(retry_after=0.1) == 0.1  # shorter than min: the server decides
    assert backoff.next_delay(retry_after=1e9) == MAX_RETRY_AFTER_S
    assert 1.0 <= backoff.next_delay(retry_after=float("inf")) <= 2.0  # unusable: the backoff
    assert capped_retry_after(-5) == 0.0 and capped_retry_after(float("nan")) is None


@pytest.mark.parametrize(
    "error, state, expected",
    [
        (Maintenance("503", 503, 7.0), LinkState.MAINTENANCE, 7.0),
        (CredentialRejected("401", 401), LinkState.CREDENTIAL_REJECTED, 60.0),
        (TokenRefused("403"), LinkState.ENROLLMENT_REFUSED, 60.0),
        (BackendUnavailable("429", 429, 12.0), LinkState.BACKOFF, 12.0),
    ],
)
def test_each_backend_error_maps_to_one_state_and_wait(error, state, expected):
    assert wait_after(error, Backoff(1.0, 2.0), slow_s=60.0) == (state, expected)


def test_other_failures_back_off_with_full_jitter_within_bounds():
    backoff = Backoff(1.0, 4.0, rng=random.Random(5))
    waits = [wait_after(ProtocolError("junk"), backoff, 60.0) for _ in range(50)]
    assert {state for state, _ in waits} == {LinkState.BACKOFF}
    assert all(1.0 <= delay <= 4.0 for _, delay in waits)
    assert max(delay for _, delay in waits[10:]) > 3.0


def test_one_maintenance_hold_a_503_heard_by_any_client_closes_every_gate(tmp_path):
    """The gate reads the shared hold: no second copy to set or to forget."""
    gate = Gate(threading.Event(), MaintenanceHold(tmp_path))
    assert gate.remaining() == 0
    MaintenanceHold(tmp_path).hold(5.0)  # what BackendClient does on a 503
    assert 4.0 < gate.remaining() <= 5.0
    # A hold file that cannot be written (a full disk, here a directory in its place):
    # this process still holds.
    blocked = tmp_path / "blocked"
    (blocked / "backend-hold").mkdir(parents=True)
    MaintenanceHold(blocked).hold(3.0)
    assert 2.0 < Gate(threading.Event(), MaintenanceHold(blocked)).remaining() <= 3.0
