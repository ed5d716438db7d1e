"""gpu.check on the inventory's side: DCGM's diagnostic where dcgmi is found, else NVML's own
checks (nvml_check.py), on the GPUs asked; each test a step, each GPU's outcome its last check
(health.py counts a DCGM failure on an idle GPU in its verdict). A GPU that runs work is judged
`inconclusive` when anything fails, never failed. The diagnostic ends within the job's limit.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

from faden_agent.common import programs
from faden_agent.workers.inventory.gpu import dcgm, nvml_check
from faden_agent.workers.inventory.gpu.dcgm import FAIL, PASS, WARN
from faden_agent.workers.inventory.gpu.remedy import Job, Tools

INCONCLUSIVE = "inconclusive"
RANK = {PASS: 0, INCONCLUSIVE: 1, WARN: 2, FAIL: 3}


class CheckEnded(Exception):
    """The check could not judge: (reason, message) for the job's end."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason, self.message = reason, message


def run_check(tools: Tools, job: Job, uuids: list[str], level: int, busy: dict[str, list[str]]) -> None:
    """The gpu.check job: ends it with the outcome of every GPU asked."""
    try:
        report = check_gpus(tools, job, uuids, level, busy)
    except CheckEnded as ended:
        job.finish(False, ended.reason, ended.message)
        return
    failed = [g for g in report["gpus"].values() if g["counted"] and g["outcome"] == FAIL]
    if failed:
        said = "; ".join(f"GPU {g['index']}: {', '.join(g['failed'])}" for g in failed)
        job.finish(False, "check_failed", f"gpu.check ({report['tool']} level {level}) failed: {said}", report)
        return
    job.finish(True, "ok", report["message"], report)


def check_gpus(tools: Tools, job: Job, uuids: list[str], level: int, busy: dict[str, list[str]]) -> dict[str, Any]:
    """Checks the GPUs (each must be in the last section); their report. CheckEnded when the
    check could not judge (no answer in time, the tool failed, DCGM busy)."""
    devices = tools.devices()
    gpus = {uuid: devices[uuid]["index"] for uuid in uuids}
    found = shutil.which(tools.dcgmi)
    tool = "dcgm" if found else "nvml"
    note = f"DCGM's diagnostic ({found} diag -r {level})" if found else f"NVML's checks ({tools.dcgmi} not found)"
    job.step("check_started", tool=tool, tool_note=note, level=level, gpus=sorted(gpus.values()))
    if found:
        tested = _dcgm(tools, job, found, level, gpus)
    else:
        tested = {uuid: nvml_check.tests(tools.probe.read_one(uuid)) for uuid in gpus}
    at = time.time()
    boot = tools.probe.health.holds.boot_id
    report: dict[str, Any] = {"tool": tool, "tool_note": note, "level": level, "gpus": {}}
    for uuid, index in gpus.items():
        judged = _judge(uuid, index, tested.get(uuid) or [], busy.get(uuid) or [])
        for test in judged["tests"]:
            job.step("test", uuid=uuid, index=index, **test)
        job.step("gpu_checked", uuid=uuid, index=index, outcome=judged["outcome"], counted=judged["counted"])
        report["gpus"][uuid] = judged
        tools.probe.health.note_check(
            uuid,
            {
                "at": round(at, 3),
                "tool": tool,
                "level": level,
                "outcome": judged["outcome"],
                "counted": judged["counted"],
                "failed": judged["failed"][:64],
                "warned": judged["warned"][:64],
                "boot": boot,
            },
        )
    tools.on_change()
    counted = [g["outcome"] for g in report["gpus"].values() if g["counted"]]
    report["outcome"] = max(counted, key=RANK.__getitem__) if counted else INCONCLUSIVE
    outcomes = [f"GPU {g['index']} {g['outcome']}" for g in report["gpus"].values()]
    report["message"] = f"gpu.check ({tool} level {level}): {', '.join(outcomes)}"
    return report


def _judge(uuid: str, index: int, tests: list[dict[str, Any]], busy_with: list[str]) -> dict[str, Any]:
    failed = [f"{t['name']}: {t['detail']}" for t in tests if t["result"] == FAIL]
    warned = [f"{t['name']}: {t['detail']}" for t in tests if t["result"] == WARN]
    outcome = FAIL if failed else WARN if warned else PASS if tests else INCONCLUSIVE
    judged: dict[str, Any] = {"index": index, "uuid": uuid, "counted": not busy_with}
    if busy_with:
        # work beside the test explains what it could not do: never a GPU fault
        tests = [{**t, "busy": True} if dcgm.busy_explains(t) else t for t in tests]
        judged["busy_with"] = busy_with
        if outcome in (FAIL, WARN):
            outcome = INCONCLUSIVE
    return {**judged, "outcome": outcome, "failed": failed, "warned": warned, "tests": tests}


def _dcgm(tools: Tools, job: Job, dcgmi: str, level: int, gpus: dict[str, int]) -> dict[str, list[dict[str, Any]]]:
    argv = dcgm.command(dcgmi, level, sorted(gpus.values()))
    ran = programs.run(argv, job.left_s(), job.stop, tools.remember_group)
    said = " ".join(argv)
    if ran.ended == "time_limit":
        raise CheckEnded("timeout", f"{said} did not end within the time limit ({ran.elapsed_s:.0f} s): ended")
    if ran.ended == "stopped":
        raise CheckEnded("cancelled", f"{said} was ended: the command stopped")
    if ran.error:
        raise CheckEnded("check_error", f"{said}: {ran.error}")
    try:
        report = dcgm.parse(ran.output)
    except dcgm.Unreadable as exc:
        raise CheckEnded("check_error", f"{said} exited {ran.exit_code}: {exc}: {ran.words(300)}") from None
    if report.runtime_error:
        if dcgm.IN_USE in report.runtime_error.lower():
            raise CheckEnded("busy", f"DCGM runs another diagnostic, not a GPU fault: {report.runtime_error}")
        raise CheckEnded("check_error", f"{said}: DCGM did not run it: {report.runtime_error}")
    return {uuid: [*report.general, *report.tests.get(index, [])] for uuid, index in gpus.items()}
