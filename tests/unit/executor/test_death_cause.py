"""The cause of a container's death by the Xid catalogue: its GPUs from device ids, else those
NVML saw its processes on; `hardware` only for a GPU-fault Xid or error event or a turn to
failed in the window (up to SETTLE_S after the death), `application` with the application's
Xids listed; the rule that decided; last stderr lines cleaned of escapes and secrets."""

from __future__ import annotations

import orjson

from faden_agent.node.gpu_faults import EVIDENCE_FILE
from faden_agent.workers.executor.death_cause import (
    SETTLE_S,
    cause,
    clean_lines,
    container_gpus,
    known_gpus,
    wants_cause,
)

ME, OTHER = "a" * 64, "b" * 64


def xid(code: int, at: float, **more) -> dict:
    return {"event": "xid", "code": code, "at": at, "source": "nvml", "boot": "c" * 32, **more}


KNOWN = {
    "GPU-a": {"index": 0, "xid": [], "containers": {ME: 990.0}},
    "GPU-b": {"index": 1, "xid": [xid(79, 1000.0)], "containers": {OTHER: 990.0}},
}


def attrs(env=(), requests=None, exit_code=1):
    return {"Config": {"Env": list(env)}, "HostConfig": {"DeviceRequests": requests}, "State": {"ExitCode": exit_code}}


def died(at=1005.0, kind="container.die", **more):
    return {"type": kind, "time": at, "exit_code": 137, "container_id": ME, **more}


def test_gpus_from_device_ids_else_from_the_processes_nvml_saw():
    assert container_gpus(attrs(["NVIDIA_VISIBLE_DEVICES=1"]), KNOWN) == ([{"index": 1, "uuid": "GPU-b"}], "device_ids")
    by_uuid = attrs(requests=[{"Driver": "nvidia", "DeviceIDs": ["GPU-a"], "Capabilities": [["gpu"]]}])
    assert container_gpus(by_uuid, KNOWN) == ([{"index": 0, "uuid": "GPU-a"}], "device_ids")
    # "all" or a count: not every GPU of the machine, the ones NVML saw its processes on
    assert container_gpus(attrs(["NVIDIA_VISIBLE_DEVICES=all"]), KNOWN, ME) == (
        [{"index": 0, "uuid": "GPU-a"}],
        "processes",
    )
    assert container_gpus(attrs(requests=[{"Driver": "nvidia", "Count": 2}]), KNOWN, OTHER)[0] == [
        {"index": 1, "uuid": "GPU-b"}
    ]
    assert container_gpus(attrs(requests=[{"Driver": "nvidia", "Count": 2}]), KNOWN, "c" * 64) == ([], "none")
    assert container_gpus(attrs(["PATH=/bin"]), KNOWN) == ([], "none")
    assert container_gpus(attrs(["NVIDIA_VISIBLE_DEVICES=7"]), KNOWN)[0] == [{"index": 7, "uuid": None}]


def test_a_gpu_fault_in_the_window_on_its_own_gpu_is_hardware():
    on_b = attrs(["NVIDIA_VISIBLE_DEVICES=1"])
    found = cause(died(), on_b, lambda: ["x"], KNOWN, 60)
    assert (found["suspected"], found["rule"], found["gpus_from"]) == ("hardware", "gpu_fault", "device_ids")
    assert [(e["code"], e["before_s"]) for e in found["evidence"]] == [(79, 5.0)]
    # the Xid logged just after the death (what killed it, read a moment later) counts too
    assert cause(died(at=1000.0 - SETTLE_S + 0.5), on_b, list, KNOWN, 60)["suspected"] == "hardware"
    late = cause(died(at=1100.0), on_b, lambda: ["boom"], KNOWN, 60)
    assert late == {
        "gpus": [{"index": 1, "uuid": "GPU-b"}],
        "gpus_from": "device_ids",
        "suspected": "application",
        "rule": "no_gpu_fault",
        "exit_code": 137,
        "last_errors": ["boom"],
    }
    assert cause(died(), attrs(["NVIDIA_VISIBLE_DEVICES=0"]), list, KNOWN, 60)["suspected"] == "application"
    assert cause(died(), None, list, KNOWN, 60)["rule"] == "no_gpus"


def test_xid_45_and_the_applications_own_xids_are_application_listed():
    gpus = {"GPU-a": {"index": 0, "xid": [xid(45, 1000.0), xid(31, 1001.0, pid=9, container_id=ME)]}}
    on_a = attrs(["NVIDIA_VISIBLE_DEVICES=0"])
    for kind in ("container.oom", "container.die"):  # an OOM 0.4 s after an Xid 45; a death after an Xid 31
        found = cause(died(at=1001.4, kind=kind), on_a, lambda: ["CUDA error"], gpus, 60)
        assert (found["suspected"], found["rule"]) == ("application", "application_xids"), kind
        assert [(x["code"], x["nvidia"]) for x in found["xids"]] == [(45, "WORKFLOW_XID_45"), (31, "RESTART_APP")]
        assert "evidence" not in found and found["last_errors"] == ["CUDA error"]
    # an application Xid another container's process raised is not this one's
    theirs = {"GPU-a": {"index": 0, "xid": [xid(13, 1000.0, pid=8, container_id=OTHER)]}}
    assert cause(died(), on_a, list, theirs, 60)["rule"] == "no_gpu_fault"
    # a GPU fault is every user's, whoever's process the line names
    fault = {"GPU-a": {"index": 0, "xid": [xid(45, 999.0), xid(48, 1000.0, pid=8, container_id=OTHER)]}}
    assert cause(died(), on_a, list, fault, 60)["suspected"] == "hardware"
    # NVML's error events by the same catalogue: a double-bit ECC error is the GPU's, a contained poison the app's
    events = {"GPU-a": {"index": 0, "xid": [{"event": "non_fatal_poison", "code": 0, "at": 1000.0}]}}
    assert cause(died(), on_a, list, events, 60)["rule"] == "application_xids"
    events["GPU-a"]["xid"].append({"event": "double_bit_ecc", "code": 0, "at": 1000.0})
    assert cause(died(), on_a, list, events, 60)["rule"] == "gpu_fault"


def test_a_turn_to_failed_is_hardware_a_turn_to_degraded_is_not():
    change = {"old": "ok", "new": "failed", "reasons": ["NVLink 0 down"], "at": 990.0}
    gpus = {"GPU-a": {"index": 0, "xid": [], "verdict_change": change}}
    found = cause(died(at=1000.0), attrs(["NVIDIA_VISIBLE_DEVICES=0"]), list, gpus, 60)
    assert (found["suspected"], found["rule"]) == ("hardware", "gpu_failed")
    assert found["evidence"] == [{"index": 0, "uuid": "GPU-a", "event": "verdict", **change, "before_s": 10.0}]
    for new in ("degraded", "ok"):
        gpus["GPU-a"]["verdict_change"] = {**change, "new": new}
        assert cause(died(at=1000.0), attrs(["NVIDIA_VISIBLE_DEVICES=0"]), list, gpus, 60)["suspected"] == "application"


def test_last_errors_lose_escapes_and_secrets_and_are_capped():
    raw = [
        "\x1b[31mERROR\x1b[0m loading \x1b]0;title\x07model\r",
        "export AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "HF hub: token hf_" + "x" * 34 + " refused",
        "pip install --index-url https://alice:s3cr3t@pypi.example/simple torch",
        "\u202eevil\u202c text \x00 with nul",
        "y" * 5000,
        "",
    ]
    cleaned = clean_lines(raw)
    assert cleaned == [
        "export AWS_ACCESS_KEY_ID=<redacted> AWS_SECRET_ACCESS_KEY=<redacted>",
        "HF hub: token <redacted> refused",
        "pip install --index-url https://<redacted>@pypi.example/simple torch",
        "evil text  with nul",
        "y" * 300,
    ]
    assert clean_lines(raw[:1]) == ["ERROR loading model"]
    assert len(clean_lines(["line"] * 50)) == 5


def test_the_evidence_comes_from_the_file_when_no_inventory_answers(tmp_path):
    runtime = tmp_path / "run"
    runtime.mkdir()
    assert known_gpus(runtime, tmp_path) == {}
    good = {"version": 1, "gpus": KNOWN, "kernel_cursor": None}
    (tmp_path / EVIDENCE_FILE).write_bytes(orjson.dumps(good))
    assert known_gpus(runtime, tmp_path) == KNOWN
    (tmp_path / EVIDENCE_FILE).write_bytes(b"\x00garbage")
    assert known_gpus(runtime, tmp_path) == {}


def test_which_events_get_a_cause():
    assert wants_cause({"type": "container.die"}) and wants_cause({"type": "container.oom"})
    assert wants_cause({"type": "container.health_status", "health": "unhealthy"})
    assert not wants_cause({"type": "container.health_status", "health": "healthy"})
    assert not wants_cause({"type": "container.start"})
