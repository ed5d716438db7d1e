"""Settings renamed since an earlier release are still read under their old names, so an
env file written for that release keeps working; the new name wins when both are set."""

from __future__ import annotations

import pytest

from faden_agent.config import ConfigError, load_config


def test_worker_liveness_is_read_under_its_old_name_worker_heartbeat():
    assert load_config({}).worker_liveness_sec == 3
    assert load_config({"FADEN_NODE_AGENT_WORKER_HEARTBEAT_SEC": "0.5"}).worker_liveness_sec == 0.5
    both = {"FADEN_NODE_AGENT_WORKER_HEARTBEAT_SEC": "0.5", "FADEN_NODE_AGENT_WORKER_LIVENESS_SEC": "2"}
    assert load_config(both).worker_liveness_sec == 2


def test_a_bad_value_under_the_old_name_is_refused_naming_the_old_name():
    with pytest.raises(ConfigError, match=r"^FADEN_NODE_AGENT_WORKER_HEARTBEAT_SEC='-1' is not allowed"):
        load_config({"FADEN_NODE_AGENT_WORKER_HEARTBEAT_SEC": "-1"})
