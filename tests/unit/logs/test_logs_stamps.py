"""Docker's and Ray's timestamps in nanoseconds, and the same-second fast path that answers as
the full parse."""

from __future__ import annotations

import pytest

from faden_agent.workers.logs.sources.ray.tail import parse_ray_ts_ns
from faden_agent.workers.logs.stamps import parse_rfc3339_ns


def test_docker_and_ray_timestamps():
    assert parse_rfc3339_ns(b"2024-01-02T03:04:05.123456789Z") == 1704164645_123456789
    assert parse_rfc3339_ns(b"2024-01-02T03:04:05.1Z") == 1704164645_100000000  # trailing zeros trimmed
    assert parse_rfc3339_ns(b"2024-01-02T03:04:05Z") == 1704164645_000000000
    assert parse_rfc3339_ns(b"2024-01-02T04:04:05+01:00") == 1704164645_000000000
    assert parse_rfc3339_ns(b"garbage") is None
    assert parse_ray_ts_ns(b"INFO 2024-01-02 03:04:05,250 controller 12 -- up") == 1704164645_250000000
    assert parse_ray_ts_ns(b'  File "x.py", line 3') is None
    # Stamps a nanosecond count cannot hold are no stamp (the line takes the previous one's)
    assert parse_ray_ts_ns(b"INFO 1900-01-01 00:00:00,000 x") is None
    assert parse_ray_ts_ns(b"INFO 9999-12-31 23:59:59,999 x") is None


@pytest.mark.parametrize(
    "stamp",
    [
        b"2024-01-02T03:04:05Z",
        b"2024-01-02T03:04:05.5Z",
        b"2024-01-02T03:04:05.000000001Z",
        b"2024-01-02T03:04:05.1234567890Z",  # ten digits: not RFC 3339 as Docker writes it
        b"2024-01-02T03:04:05.Z",
        b"2024-01-02T03:04:05.12a4Z",
        b"2024-01-02T03:04:05.1_2Z",  # int() would take it
        b"2024-01-02T03:04:05. 12Z",
        b"2024-01-02T03:04:05,5Z",
        b"2024-01-02T03:04:05.5+00:00",
        b"2024-01-02T03:04:06.5Z",
    ],
)
def test_the_same_second_fast_path_answers_as_the_full_parse(stamp):
    """After a stamp of the same second primed the fast path, each stamp parses as it does
    cold (the fast path only skips datetime for Docker's own UTC form)."""
    parse_rfc3339_ns(b"1999-01-01T00:00:00Z")  # another second primed: the full parse
    cold = parse_rfc3339_ns(stamp)
    parse_rfc3339_ns(b"2024-01-02T03:04:05.9Z")  # prime 03:04:05
    assert parse_rfc3339_ns(stamp) == cold
