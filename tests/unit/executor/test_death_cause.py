"""The cause of a container's death: its GPUs from device requests or NVIDIA_VISIBLE_DEVICES,
placed by the GPU evidence file; an Xid on one of them within the window -> hardware."""

from __future__ import annotations

import orjson

from faden_agent.node.gpu_faults import EVIDENCE_FILE
from faden_agent.workers.executor.death_cause import cause, container_gpus, wants_cause

KNOWN = {
    "GPU-a": {"index": 0, "xid": []},
    "GPU-b": {"index": 1, "xid": [{"event": "xid", "code": 79, "at": 1000.0, "source": "nvml"}]},
}


def attrs(env=(), requests=None, exit_code=1):
    return {"Config": {"Env": list(env)}, "HostConfig": {"DeviceRequests": requests}, "State": {"ExitCode": exit_code}}


def test_gpus_from_each_source():
    assert container_gpus(attrs(["NVIDIA_VISIBLE_DEVICES=1"]), KNOWN) == [{"index": 1, "uuid": "GPU-b"}]
    by_uuid = attrs(requests=[{"Driver": "nvidia", "DeviceIDs": ["GPU-a"], "Capabilities": [["gpu"]]}])
    assert container_gpus(by_uuid, KNOWN) == [{"index": 0, "uuid": "GPU-a"}]
    every = [{"index": 0, "uuid": "GPU-a"}, {"index": 1, "uuid": "GPU-b"}]
    assert container_gpus(attrs(["NVIDIA_VISIBLE_DEVICES=all"]), KNOWN) == every
    assert container_gpus(attrs(requests=[{"Driver": "nvidia", "Count": 2}]), KNOWN) == every
    assert container_gpus(attrs(["PATH=/bin"]), KNOWN) == []
    assert container_gpus(attrs(["NVIDIA_VISIBLE_DEVICES=7"]), KNOWN) == [{"index": 7, "uuid": None}]


def write(tmp_path, gpus):
    (tmp_path / EVIDENCE_FILE).write_bytes(orjson.dumps({"version": 1, "gpus": gpus, "kernel_cursor": None}))


def test_hardware_only_within_the_window_and_on_its_own_gpus(tmp_path):
    write(tmp_path, KNOWN)
    died = {"type": "container.die", "time": 1005.0, "exit_code": 137}
    on_b = attrs(["NVIDIA_VISIBLE_DEVICES=1"])
    found = cause(died, on_b, lambda: ["x"], tmp_path, 60)
    assert found["suspected"] == "hardware" and found["evidence"][0]["code"] == 79
    assert found["evidence"][0]["before_s"] == 5.0
    late = cause({**died, "time": 1100.0}, on_b, lambda: ["boom"], tmp_path, 60)
    assert late == {
        "gpus": [{"index": 1, "uuid": "GPU-b"}],
        "suspected": "application",
        "exit_code": 137,
        "last_errors": ["boom"],
    }
    on_a = cause(died, attrs(["NVIDIA_VISIBLE_DEVICES=0"]), lambda: [], tmp_path, 60)
    assert on_a["suspected"] == "application"


def test_no_evidence_file_or_a_corrupt_one_is_no_evidence(tmp_path):
    died = {"type": "container.oom", "time": 5.0}
    assert cause(died, None, lambda: [], tmp_path, 60) == {
        "gpus": [],
        "suspected": "application",
        "exit_code": None,
        "last_errors": [],
    }
    (tmp_path / EVIDENCE_FILE).write_bytes(b"\x00garbage")
    assert cause(died, attrs(["NVIDIA_VISIBLE_DEVICES=0"]), lambda: [], tmp_path, 60)["gpus"] == [
        {"index": 0, "uuid": None}
    ]


def test_which_events_get_a_cause():
    assert wants_cause({"type": "container.die"}) and wants_cause({"type": "container.oom"})
    assert wants_cause({"type": "container.health_status", "health": "unhealthy"})
    assert not wants_cause({"type": "container.health_status", "health": "healthy"})
    assert not wants_cause({"type": "container.start"})


def test_a_verdict_turned_failed_within_the_window_is_hardware(tmp_path):
    change = {"old": "ok", "new": "failed", "reasons": ["NVLink 0 down"], "at": 990.0}
    write(tmp_path, {"GPU-a": {"index": 0, "xid": [], "verdict_change": change}})
    died = {"type": "container.die", "time": 1000.0, "exit_code": 1}
    found = cause(died, attrs(["NVIDIA_VISIBLE_DEVICES=0"]), lambda: [], tmp_path, 60)
    assert found["suspected"] == "hardware"
    assert found["evidence"] == [{"index": 0, "uuid": "GPU-a", "event": "verdict", **change, "before_s": 10.0}]
    back_to_ok = {**change, "old": "failed", "new": "ok"}
    write(tmp_path, {"GPU-a": {"index": 0, "xid": [], "verdict_change": back_to_ok}})
    assert cause(died, attrs(["NVIDIA_VISIBLE_DEVICES=0"]), lambda: [], tmp_path, 60)["suspected"] == "application"
