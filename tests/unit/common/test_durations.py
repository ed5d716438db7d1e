"""Durations are finite and bounded wherever one is parsed (common/durations.py): a setting, a
host request's --deadline and --wait, a command spec's deadline_s; a number of 400 digits, inf,
nan, 0 or a negative is refused with one line naming the value. The state directory and the
runtime directory are checked alike (disk/files.py ensure_private_dir); drain.json's fields
of a wrong type are left out, never raised."""

from __future__ import annotations

import os

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from faden_agent import protocol
from faden_agent.cli.hostrequest import durations_asked, outcome_lines
from faden_agent.common.durations import MAX_DURATION_S, BadDuration, parse_duration, seconds
from faden_agent.config import ConfigError, load_config
from faden_agent.disk.files import PrivateDirError, ensure_private_dir
from faden_agent.node import drainstate
from faden_agent.workers.executor.specs import SpecError
from faden_agent.workers.executor.specs import seconds as spec_seconds

HUGE = "9" * 400


PARSED = [("90", 90.0), ("90s", 90.0), ("5m", 300.0), ("1.5h", 5400.0), ("500ms", 0.5), ("2d", 172800.0)]


@pytest.mark.parametrize(("text", "expected"), PARSED)
def test_durations_parse(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", [HUGE, HUGE + "h", "inf", "nan", "0", "-1", "1e400", "", "soon", "5 parsecs"])
def test_what_is_no_bounded_duration_is_refused_in_one_line(text):
    with pytest.raises(BadDuration) as caught:
        parse_duration(text, "--deadline")
    assert "--deadline" in str(caught.value) and "\n" not in str(caught.value) and len(str(caught.value)) < 200


@given(st.one_of(st.floats(), st.integers(), st.booleans(), st.text(max_size=30), st.none()))
def test_any_value_is_a_bounded_number_of_seconds_or_bad_duration(value):
    try:
        got = parse_duration(value) if isinstance(value, str) else seconds(value)
    except BadDuration:
        return
    assert 0 < got <= MAX_DURATION_S


def test_the_drain_deadline_and_the_wait_are_bounded_by_what_the_backend_takes():
    with pytest.raises(BadDuration, match="--deadline"):
        durations_asked("drain", HUGE, None)  # was infinity, stored as null: a drain never expiring
    with pytest.raises(BadDuration, match="--deadline"):
        durations_asked("drain", f"{protocol.MAX_DRAIN_DEADLINE_S * 2:.0f}", None)
    with pytest.raises(BadDuration, match="--wait"):
        durations_asked("cordon", None, HUGE)
    deadline, wait = durations_asked("drain", "5m", None)
    assert deadline == 300 and 300 < wait < 1000


@pytest.mark.parametrize("raw", [HUGE, "1e400", "inf", "0", "31622401"])
def test_a_duration_setting_out_of_bounds_is_a_config_error(raw):
    with pytest.raises(ConfigError, match="HEARTBEAT_INTERVAL_SEC"):
        load_config({"FADEN_NODE_AGENT_HEARTBEAT_INTERVAL_SEC": raw, "FADEN_NODE_AGENT_BACKEND_URL": "http://x"})


@pytest.mark.parametrize("value", [1e308, float("inf"), True, 0, -5, "60"])
def test_a_spec_deadline_out_of_bounds_is_refused(value):
    with pytest.raises(SpecError, match="deadline_s"):
        spec_seconds("deadline_s", value)


def test_a_private_directory_others_can_write_is_refused_one_they_can_enter_tightened(tmp_path):
    path = ensure_private_dir(tmp_path / "state", "state directory")
    os.chmod(path, 0o755)
    ensure_private_dir(path, "state directory")
    assert path.stat().st_mode & 0o777 == 0o700
    for mode in (0o777, 0o770, 0o1777):
        os.chmod(path, mode)
        with pytest.raises(PrivateDirError, match="writable by others"):
            ensure_private_dir(path, "state directory")
    link = tmp_path / "link"
    link.symlink_to(path)
    with pytest.raises(PrivateDirError, match="not a directory"):
        ensure_private_dir(link, "state directory")


def test_drain_json_fields_of_a_wrong_type_are_left_out(tmp_path):
    (tmp_path / drainstate.DRAIN_FILE).write_bytes(
        orjson.dumps({"state": "draining", "since": "x", "answers": "x", "containers": [1], "request_id": 5})
    )
    data = drainstate.read(tmp_path)
    assert data == {"state": "draining", "answers": {}, "containers": {}}
    assert drainstate.heartbeat_view(tmp_path)["since"] is None
    code, lines = outcome_lines({"state": "succeeded", "message": "ok", "result": {"containers": {"a": "x"}}})
    assert code == 0 and lines == ["ok", "  a: None (exit code None)"]
    assert outcome_lines({"state": "succeeded", "message": "ok", "result": []})[1] == ["ok"]
