"""Spec validation: normalised output for good specs, one clear line for bad ones."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faden_agent import protocol
from faden_agent.workers.executor.commands import COMMAND_KINDS, KINDS
from faden_agent.workers.executor.specs import SpecError


def validate(kind, spec):
    return KINDS[kind].validate(spec)


def deadline_for(kind, spec, envelope_deadline, received_at):
    return KINDS[kind].deadline(spec, envelope_deadline, received_at)


def test_container_run_is_normalised():
    spec = validate(
        "container.run",
        {
            "name": "ray-head",
            "image": "rayproject/ray:2.9",
            "command": ["ray", "start"],
            "env": {"N": 2},
            "gpus": 2,
            "shm_size": "8g",
            "ulimits": {"memlock": -1, "nofile": {"soft": 1, "hard": 2}},
            "restart_policy": "unless-stopped",
            "ports": {"8265/tcp": 8265, "6379": None},
            "healthcheck": {"test": ["CMD", "true"], "interval_s": 2, "retries": 3},
            "ray": True,
        },
    )
    assert spec["env"] == {"N": "2"}
    assert spec["shm_size"] == 8 * 1024**3
    assert spec["ulimits"] == [{"name": "memlock", "soft": -1, "hard": -1}, {"name": "nofile", "soft": 1, "hard": 2}]
    assert spec["restart_policy"] == {"Name": "unless-stopped"}
    assert spec["healthcheck"] == {"test": ["CMD", "true"], "interval": 2_000_000_000, "retries": 3}
    assert spec["pull"] == "missing" and spec["replace"] is False and spec["mounts"] == []


@pytest.mark.parametrize(
    "kind, spec, culprit",
    [
        ("container.run", {"image": "x"}, "'name'"),
        ("container.run", {"name": "bad name", "image": "x"}, "'name'"),
        ("container.run", {"name": "a", "image": "x", "command": "sleep 1"}, "'command'"),
        ("container.run", {"name": "a", "image": "x", "gpus": 0}, "'gpus'"),
        ("container.run", {"name": "a", "image": "x", "gpus": "most"}, "'gpus'"),
        ("container.run", {"name": "a", "image": "x", "labels": {protocol.LABEL_MANAGED: "false"}}, "reserved"),
        ("container.run", {"name": "a", "image": "x", "mounts": [{"source": "rel", "target": "/x"}]}, "absolute"),
        ("container.run", {"name": "a", "image": "x", "ports": {"http": 80}}, "'ports'"),
        ("container.run", {"name": "a", "image": "x", "shm_size": "lots"}, "'shm_size'"),
        ("container.run", {"name": "a", "image": "x", "restart_policy": "sometimes"}, "'restart_policy'"),
        ("container.run", {"name": "a", "image": "x", "privileged": "yes"}, "'privileged'"),
        ("container.run", {"name": "a", "image": "x", "cap_add": "SYS_ADMIN"}, "'cap_add'"),
        ("container.run", {"name": "a", "image": "x", "colour": "red"}, "colour"),
        ("container.stop", {"name": "a", "timeout_s": -1}, "'timeout_s'"),
        ("image.pull", {"image": "x", "auth": {"username": "u"}}, "'auth'"),
        ("command.cancel", {}, "'command_id'"),
        ("container.remove", "a", "must be an object"),
    ],
)
def test_bad_specs_name_the_culprit(kind, spec, culprit):
    with pytest.raises(SpecError) as caught:
        validate(kind, spec)
    message = str(caught.value)
    assert culprit in message and "\n" not in message


def test_credentials_are_never_echoed():
    with pytest.raises(SpecError) as caught:
        validate("image.pull", {"image": "x", "auth": {"username": "u", "password": 12345}})
    assert "12345" not in str(caught.value)


def test_deadline_is_the_earliest_given():
    spec = validate("container.run", {"name": "a", "image": "x", "deadline_s": 10})
    assert deadline_for("container.run", spec, None, 1000.0) == 1010.0
    assert deadline_for("container.run", spec, 1005.0, 1000.0) == 1005.0
    plain = validate("container.stop", {"name": "a"})
    assert deadline_for("container.stop", plain, None, 1000.0) > 1000.0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(COMMAND_KINDS),
    spec=st.dictionaries(
        st.sampled_from(
            [
                "name",
                "image",
                "command",
                "env",
                "gpus",
                "ports",
                "mounts",
                "ulimits",
                "healthcheck",
                "shm_size",
                "restart_policy",
                "timeout_s",
                "command_id",
                "labels",
                "auth",
                "deadline_s",
            ]
        ),
        json_values,
        max_size=6,
    )
    | json_values,
)
def test_any_json_is_either_valid_or_a_spec_error(kind, spec):
    try:
        validate(kind, spec)
    except SpecError as exc:
        assert str(exc)


@pytest.mark.parametrize("value", ["9" * 5000, "9" * 19 + "g", "8g\n", 2**63])
def test_a_size_beyond_int64_is_a_spec_error_quoting_little(value):
    # Was: int() of 5000 digits raised ValueError, which crashed the executor at every start.
    with pytest.raises(SpecError) as caught:
        validate("container.run", {"name": "a", "image": "x", "shm_size": value})
    assert "'shm_size'" in str(caught.value) and len(str(caught.value)) < 400
