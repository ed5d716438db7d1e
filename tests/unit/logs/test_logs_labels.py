"""The labels of a log stream: the level from journald's priority, the documented five of the
system logs, a container's and a Ray file's, low in cardinality."""

from __future__ import annotations

import pytest

from faden_agent.config import load_config
from faden_agent.workers.logs.labels import LINE_LEVELS, LabelMaker, file_kind, level_from_priority


@pytest.mark.parametrize(
    "priority,level",
    [
        ("0", "emerg"),
        ("1", "alert"),
        ("2", "crit"),
        ("3", "error"),
        ("4", "warning"),
        ("5", "notice"),
        ("6", "info"),
        ("7", "debug"),
        (None, "info"),
        ("9", "info"),
        ("x", "info"),
        ([1], "info"),
    ],
)
def test_levels_from_journald_priority(priority, level):
    assert level_from_priority(priority) == level


def test_system_labels_are_exactly_the_documented_five(tmp_path):
    config = load_config({}, agent_id="gpu-7", advertise_host="10.1.2.3", state_path=tmp_path / "s.json")
    labels = dict(LabelMaker(config).system("warning"))
    assert labels == {
        "job": "node-agent",
        "host": "10.1.2.3",
        "agent_id": "gpu-7",
        "container": "node-gpu-7",
        "level": "warning",
    }


def test_container_and_ray_labels_name_the_container_and_stay_low_cardinality(tmp_path):
    maker = LabelMaker(load_config({}, agent_id="a", advertise_host="h", state_path=tmp_path / "s.json"))
    by_level = maker.container("ray-head", "c1", None, "stderr")
    assert set(by_level) == set(LINE_LEVELS)
    assert dict(by_level["error"]) == {
        "job": "node-agent",
        "host": "h",
        "agent_id": "a",
        "container": "ray-head",
        "cluster": "c1",
        "source": "container",
        "stream": "stderr",
        "level": "error",
    }
    assert dict(maker.ray_file("ray-head", "replica_app_Model_x1y2.log")["info"])["file"] == "replica"
    assert file_kind("controller_1234.log") == "controller"
    assert file_kind("_odd.log") == "other"
    core = {
        name: dict(maker.ray_file("ray-head", name, core=True)["unknown"])["file"]
        for name in [
            "raylet.out",
            "gcs_server.err",
            "python-core-worker-01ab_412.log",
            "worker-01ab-01000000-412.out",
            "monitor.log",
            "dashboard.log",
            "dashboard_agent.log",
            "anything-a-container-names.log",
        ]
    }
    assert core == {
        "raylet.out": "raylet",
        "gcs_server.err": "gcs_server",
        "python-core-worker-01ab_412.log": "core_worker",
        "worker-01ab-01000000-412.out": "worker",
        "monitor.log": "monitor",
        "dashboard.log": "dashboard",
        "dashboard_agent.log": "dashboard_agent",
        "anything-a-container-names.log": "other",
    }
    assert dict(maker.ray_file("ray-head", "raylet.out", core=True)["info"])["source"] == "ray"
