"""Property tests over command specs, key by key (tests/unit/executor/test_executor_specs.py fuzzes whole
specs; most of those fail on the first key, so the nested checks are reached here): start
from a valid spec of each kind, replace one key (or a field inside it) with any JSON value
as the stream delivers it (orjson round trip: no NaN/inf, ints up to 64 bits), and require
a normalised spec or one SpecError line; never another exception (which would crash the
executor on every restart, since the command is journaled before it is validated)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from faden_agent.workers.executor.commands import KINDS
from faden_agent.workers.executor.specs import SpecError
from tests.support.specfuzz import NESTED, VALID, mutated, values


def test_the_valid_specs_are_valid():
    for kind, spec in VALID.items():
        KINDS[kind].validate(spec)


@settings(max_examples=300, deadline=None)
@given(case=mutated(), envelope_deadline=st.none() | st.floats(allow_nan=False, allow_infinity=False))
def test_each_key_is_normalised_or_refused_in_one_line(case, envelope_deadline):
    check(*case, envelope_deadline)


@settings(max_examples=300, deadline=None)
@given(place=st.sampled_from(sorted(NESTED)), value=values)
def test_each_nested_field_is_normalised_or_refused_in_one_line(place, value):
    kind = "image.pull" if place == "auth" else "image.fetch" if place == "peers" else "container.run"
    check(kind, {**VALID[kind], place: NESTED[place](value)}, None)


def check(kind: str, spec: dict, envelope_deadline: float | None) -> None:
    definition = KINDS[kind]
    try:
        normal = definition.validate(spec)
    except SpecError as exc:
        message = str(exc)
        assert message and "\n" not in message
        assert "SECRET-PW" not in message and "SECRET-TICKET" not in message
        password = spec["auth"].get("password") if isinstance(spec.get("auth"), dict) else None
        if "'auth'" in message and password:
            assert repr(password) not in message, "a registry password was echoed"
        return
    assert set(normal) == set(definition.required) | set(definition.optional)
    assert definition.inline or definition.queue_key(normal)
    deadline = definition.deadline(normal, envelope_deadline, 1_700_000_000.0)
    assert isinstance(deadline, float) and not math.isnan(deadline)
    if "healthcheck" in normal and normal["healthcheck"]:
        assert all(
            1_000_000 <= normal["healthcheck"].get(k, 1_000_000) < 2**63
            for k in ("interval", "timeout", "start_period")
        )
