"""Property tests over backend answers as the agent's HTTP client sees them, on a real socket:
any status, body and Retry-After becomes a typed outcome (a value of the promised shape or
a BackendError subclass with a one-line message), never another exception."""

from __future__ import annotations

import math

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faden_agent.backend.client import (
    DEFAULT_MAINTENANCE_WAIT_S,
    MAX_RETRY_AFTER_S,
    BackendClient,
    BackendError,
    BackendUnavailable,
    CredentialRejected,
    Maintenance,
    ProtocolError,
    RequestRejected,
    TokenRefused,
    parse_retry_after,
)
from tests.support.fuzzvalues import FUZZ_CREDENTIAL, json_values, retry_afters

# The keys the client reads, with any value: the wrong-shape answers that look almost right.
shaped = st.fixed_dictionaries(
    {},
    optional={
        k: json_values
        for k in ("node_id", "credential", "acked", "rejected", "mode", "url", "path", "message", "error")
    },
)
bodies = st.one_of(
    st.binary(max_size=64),
    json_values.map(orjson.dumps),
    shaped.map(orjson.dumps),
    st.sampled_from(
        [
            b"",
            b"not json",
            b"{",
            b"[]",
            b"null",
            b'"text"',
            b"\xff\xfe{}",
            b"line one\nline two\r\n",
            b'{"acked": ["a"], "rejected": null}',
            b'{"mode": "loki", "url": "http://x"}',
            b'{"node_id": "n", "credential": "c"}',
            b'{"message": "' + b"x" * (1 << 20) + b'"}',
        ]
    ),
)
statuses = st.integers(200, 599) | st.sampled_from([200, 204, 400, 401, 403, 404, 408, 413, 429, 500, 502, 503])
operations = st.sampled_from(["enroll", "uplink", "log_target", "push_logs", "stream"])


def call(client: BackendClient, operation: str):
    if operation == "enroll":
        return client.enroll("fuzz-token", {"agent_id": "a"})
    if operation == "uplink":
        return client.post_reports([{"id": "r1", "kind": "event", "ts": 1.0, "data": {}}])
    if operation == "log_target":
        return client.log_target()
    if operation == "push_logs":
        return client.push_logs(b'{"streams": []}')
    return list(client.open_stream(0, 1.0))  # ends with an exception by contract


def check_value(operation: str, value) -> None:
    if operation == "enroll":
        assert isinstance(value["node_id"], str) and isinstance(value["credential"], str)
    elif operation == "uplink":
        acked, rejected = value
        assert all(isinstance(i, str) for i in acked + rejected)
    elif operation == "log_target":
        assert (value["mode"], type(value.get("url") or value.get("path"))) in (("loki", str), ("push", str))
    else:
        assert value is None


def check_error(operation: str, status: int, exc: BackendError) -> None:
    message = str(exc)
    assert message and "\n" not in message and "\r" not in message, f"not one line: {message!r}"
    assert FUZZ_CREDENTIAL not in message and "fuzz-token" not in message
    if status == 503:
        assert isinstance(exc, Maintenance)
        assert 0 <= exc.retry_after <= MAX_RETRY_AFTER_S
    elif status in (401, 403):
        assert isinstance(exc, TokenRefused if operation == "enroll" else CredentialRejected)
    elif status in (408, 429) or status >= 500:
        assert type(exc) is BackendUnavailable and exc.status == status
        assert exc.retry_after is None or 0 <= exc.retry_after <= MAX_RETRY_AFTER_S
    elif status >= 400:
        assert isinstance(exc, RequestRejected) and exc.status == status
    elif operation == "stream" and status < 300:
        assert isinstance(exc, (ProtocolError, BackendUnavailable))  # a bad line, or the end of the stream
    else:  # 2xx of the wrong shape, or a 3xx that was not followed: not done, and not the request's fault
        assert isinstance(exc, ProtocolError), f"HTTP {status} answered with {exc!r}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operation=operations, status=statuses, body=bodies, retry_after=retry_afters)
def test_any_answer_is_a_typed_outcome(scripted_http, scripted_client, operation, status, body, retry_after):
    scripted_http.answer(status, body, {"Retry-After": retry_after} if retry_after is not None else {})
    try:
        value = call(scripted_client, operation)
    except BackendError as exc:
        check_error(operation, status, exc)
    else:
        assert 200 <= status < 300, f"HTTP {status} returned {value!r}"
        check_value(operation, value)


@settings(max_examples=300, deadline=None)
@given(value=retry_afters)
def test_retry_after_is_none_or_a_bounded_wait(value):
    seconds = parse_retry_after(value)
    assert seconds is None or (math.isfinite(seconds) and 0 <= seconds <= MAX_RETRY_AFTER_S)


def test_maintenance_without_a_usable_retry_after_waits_the_default(scripted_http, scripted_client):
    for header in ("inf", "nan", "soon"):
        scripted_http.answer(503, b"", {"Retry-After": header})
        with pytest.raises(Maintenance) as caught:
            scripted_client.post_reports([])
        assert caught.value.retry_after == DEFAULT_MAINTENANCE_WAIT_S
    scripted_http.answer(503, b"", {"Retry-After": "1e12"})
    with pytest.raises(Maintenance) as caught:
        scripted_client.post_reports([])
    assert caught.value.retry_after == MAX_RETRY_AFTER_S
