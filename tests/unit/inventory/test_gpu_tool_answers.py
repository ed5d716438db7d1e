"""What dcgmi and nvidia-smi answer, read as the agent reads them: the stand-ins' output (their
forms and sources are in tests/nvml/dcgmi and tests/nvml/nvidia-smi) parsed into test results
and reset causes, and hostile output (not JSON, wrong types, nesting, a GPU id out of range)
an Unreadable naming what, or a result left out, never an exception of another kind."""

from __future__ import annotations

import json
import os
import subprocess

import orjson
import pytest

from faden_agent.common.programs import Ran
from faden_agent.workers.inventory.gpu import dcgm, smi
from tests.nvml.state import DCGMI, NVIDIA_SMI, GpuState


def dcgmi(tmp_path, level: int, indices: str, **scenario) -> subprocess.CompletedProcess:
    gpus = GpuState(tmp_path / "nvml", count=2)
    gpus.gpus[0]["compute"] = {"count": 1, "0": {"pid": os.getpid(), "used": 1 << 30}}  # GPU 0 runs work
    gpus.dcgmi = scenario
    gpus.write()
    argv = [str(DCGMI), "diag", "-r", str(level), "-i", indices, "-j"]
    return subprocess.run(argv, env={**os.environ, **gpus.env(dcgm=True)}, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("form", ["4", "3"])
def test_both_json_forms_become_the_same_results(tmp_path, form):
    fault = {"test": "memory", "error_id": 52, "warning": "Found 3 faulty memory elements on GPU 1"}
    ran = dcgmi(tmp_path, 2, "0,1", format=form, fail={"1": fault})
    assert ran.returncode == 226  # DCGM_ST_NVVS_ERROR: a test failed
    report = dcgm.parse(ran.stdout)
    assert report.version == ("4.2.3" if form == "4" else "3.3.9")
    for index in (0, 1):
        assert [t["name"] for t in report.tests[index]] == ["software", "pcie", "memory"]
    memory0, memory1 = report.tests[0][2], report.tests[1][2]
    assert (memory1["result"], memory1["detail"], memory1["error_ids"]) == ("fail", fault["warning"], [52])
    assert not dcgm.busy_explains(memory1)  # a faulty memory element: the GPU's own
    assert (memory0["result"], memory0["error_ids"]) == ("fail", [56])  # the work holds the memory
    assert dcgm.busy_explains(memory0)
    assert report.tests[0][0]["result"] == "pass" and report.runtime_error is None


def test_a_diagnostic_that_could_not_run_is_its_runtime_error(tmp_path):
    ran = dcgmi(tmp_path, 1, "0", runtime_error="in_use")
    assert ran.returncode == 222  # DCGM_ST_IN_USE
    report = dcgm.parse(ran.stdout)
    assert dcgm.IN_USE in report.runtime_error and report.tests == {}


@pytest.mark.parametrize(
    "text, fault",
    [
        ("", "no JSON object"),
        ("Error: unable to connect to host engine", "no JSON object"),
        ("{not json}", "does not parse"),
        ("[1, 2]", "no JSON object"),
        ('{"other": {}}', "none of DCGM Diagnostic"),
        ('{"DCGM Diagnostic": {"test_categories": 5}}', "test_categories is not a list"),
        ("{" * 5000 + "}" * 5000, "does not parse"),
    ],
)
def test_unreadable_output_names_what(text, fault):
    with pytest.raises(dcgm.Unreadable, match=fault):
        dcgm.parse(text)


def test_hostile_fields_are_left_out_or_bounded():
    results = [
        "x",
        {"entity_group": "GPU", "entity_id": 10**12, "status": "Pass"},  # no such GPU id: not tied to one
        {"entity_group": "CPU", "entity_group_id": 7, "entity_id": 0, "status": "Fail"},
        {"gpu_id": "1", "status": "Warn - All", "warnings": ["x", {"warning": "w" * 5000, "error_id": "5"}]},
        {"gpu_id": 0, "status": None, "info": ["a", 5]},
    ]
    text = orjson.dumps(
        {"DCGM Diagnostic": {"test_categories": [{"category": 5, "tests": [{"name": 7, "results": results}, "y"]}]}}
    )
    report = dcgm.parse(text.decode())
    assert [(r["result"], r["name"]) for r in report.general] == [("pass", "7"), ("fail", "7")]
    (warned,) = report.tests[1]
    assert warned["result"] == "warn" and len(warned["detail"]) <= dcgm.MAX_TEXT and warned["error_ids"] == []
    (unknown,) = report.tests[0]
    assert (unknown["result"], unknown["detail"]) == ("skip", "a; 5")


def smi_run(tmp_path, argv: list[str], setup=None, **scenario) -> tuple[Ran, GpuState]:
    gpus = GpuState(tmp_path / "nvml", count=2)
    gpus.smi = scenario
    if setup:
        setup(gpus)
    gpus.write()
    done = subprocess.run(
        [str(NVIDIA_SMI), *argv], env={**os.environ, **gpus.env()}, capture_output=True, text=True, timeout=30
    )
    return Ran(tuple(argv), done.returncode, done.stdout + done.stderr, 0.1), gpus


def test_each_answer_of_a_reset_is_its_cause(tmp_path):
    bus = "00000000:18:00.0"
    off = lambda g: g.gpus[1].update(persistence=0)  # noqa: E731
    done, gpus = smi_run(tmp_path / "a", ["--gpu-reset", "-i", bus], off)
    assert smi.reset_cause(done) is None and done.output.splitlines() == [
        f"GPU {bus} was successfully reset.",
        "All done.",
    ]
    gpus.read_back()
    assert gpus.gpus[1]["ecc"]["corrected"]["volatile"] == 0  # what NVML shows after a reset

    held, _ = smi_run(tmp_path / "b", ["--gpu-reset", "-i", bus])  # persistence mode on: held
    assert (held.exit_code, smi.reset_cause(held)) == (255, smi.IN_USE)
    assert f"GPU {bus}: In use by another client" in held.output

    working = lambda g: (off(g), g.gpus[1].update(compute={"count": 1, "0": {"pid": 1, "used": 1}}))  # noqa: E731
    busy, _ = smi_run(tmp_path / "c", ["--gpu-reset", "-i", bus], working)
    assert smi.reset_cause(busy) == smi.IN_USE

    primary, _ = smi_run(tmp_path / "d", ["--gpu-reset", "-i", bus], off, primary=bus)
    assert smi.reset_cause(primary) == smi.PRIMARY
    assert f"GPU Reset couldn't run because GPU {bus} is the primary GPU." in primary.output

    lost, _ = smi_run(tmp_path / "e", ["-r", "-i", bus], lambda g: g.gpus[1].update(fail_all=999))
    assert (lost.exit_code, smi.reset_cause(lost)) == (15, smi.LOST)

    unknown, _ = smi_run(tmp_path / "f", ["--gpu-reset", "-i", "00000000:99:00.0"])
    assert (unknown.exit_code, unknown.output.strip(), smi.reset_cause(unknown)) == (
        6,
        "No devices were found",
        smi.FAILED,
    )

    pm, gpus = smi_run(tmp_path / "g", ["-pm", "0", "-i", bus])
    assert pm.output.splitlines() == [f"Disabled persistence mode for GPU {bus}.", "All done."]
    gpus.read_back()
    assert gpus.gpus[1]["persistence"] == 0


def test_what_happened_instead_of_the_tool_s_words():
    hung = Ran(("nvidia-smi", "--gpu-reset"), None, "", 120.0, ended="time_limit")
    assert smi.reset_cause(hung) == smi.HUNG
    assert smi.said(hung) == "nvidia-smi did not end within 120 s: ended (its process group)"
    missing = Ran(("/no/nvidia-smi",), None, "", 0.0, error="/no/nvidia-smi: No such file or directory")
    assert (smi.reset_cause(missing), smi.said(missing)) == (smi.FAILED, "/no/nvidia-smi: No such file or directory")
    odd = Ran(("nvidia-smi",), 0, "something else\n\n", 1.0)  # exit 0 without its words: not taken as done
    assert smi.reset_cause(odd) == smi.FAILED and smi.said(odd) == "something else (exit 0)"


def test_the_stand_ins_log_their_calls(tmp_path):
    log = tmp_path / "calls"
    dcgmi(tmp_path, 1, "0", log=str(log))
    assert [json.loads(line) for line in log.read_text().splitlines()] == [["diag", "-r", "1", "-i", "0", "-j"]]
