"""gpu.check in a real agent at the real reference backend, on tests/nvml's C GPUs and a Docker
engine of the test's own (no other test's container uses its GPUs there): without DCGM
the NVML checks (each test in the timeline, a narrow PCIe link failed), with DCGM's diagnostic by
the stand-in dcgmi (tests/nvml/dcgmi: its 4.x and 3.x JSON) a memory fault fails its GPU's verdict
until a passing check; from the host CLI too; a GPU that runs work refused, and with allow_busy
checked without a false fault; DCGM busy with another diagnostic is no fault; a diagnostic past
its time limit is ended with its whole process group, also one that ignores SIGTERM."""

from __future__ import annotations

import subprocess
import time

import pytest

from faden_agent import protocol
from faden_agent.workers.inventory.gpu import nvml_check
from tests.conftest import TEST_IMAGE
from tests.nvml.state import GpuState
from tests.support.agentproc import pid_alive, wait_for
from tests.support.backendproc import backend  # noqa: F401 - the fixture
from tests.support.gpuremedy import (
    cli,
    computes_on,
    devices,
    health,
    on_gpus,
    outcome,
    own_engine,  # noqa: F401 - the fixture
    run,
    start_agent,
    steps,
)

pytestmark = pytest.mark.docker

FAULTY = "Found 3 faulty memory elements on GPU 1"


def test_without_dcgm_the_nvml_checks_run_each_test_in_the_timeline(backend, own_engine, tmp_path):  # noqa: F811
    gpus = GpuState(tmp_path / "nvml", count=2)
    gpus.gpus[1]["pcie"]["width"] = 8  # a link trained down to x8 of x16
    gpus.write()
    agent, env, node_id = start_agent(backend, tmp_path / "agent", gpus, own_engine[0])
    try:
        assert {protocol.GPU_CHECK_CAPABILITY, protocol.GPU_RESET_CAPABILITY} <= set(
            backend.admin.node(node_id)["capabilities"]
        )
        command = run(backend, node_id, "gpu.check", {"gpus": "all", "level": 1})
        end = outcome(command)
        assert (end["state"], end["reason"]) == ("failed", "check_failed"), end
        assert "GPU 1: pcie_link: link narrower than its maximum: gen 5 of 5, x8 of x16" in end["message"]
        (started,) = steps(command, "check_started")
        assert (started["tool"], started["level"], started["gpus"]) == ("nvml", 1, [0, 1])
        assert "not found" in started["tool_note"]
        tests = steps(command, "test")
        assert [t["name"] for t in tests if t["index"] == 0] == list(nvml_check.TESTS)
        assert {t["result"] for t in tests if t["index"] == 0} == {"pass"}
        (narrow,) = [t for t in tests if t["result"] != "pass"]
        assert (narrow["index"], narrow["name"], narrow["result"]) == (1, "pcie_link", "fail")
        assert [(g["index"], g["outcome"]) for g in steps(command, "gpu_checked")] == [(0, "pass"), (1, "fail")]
        # the fresh read is the verdict's: the table's own rule says it, the last check beside it
        gpu1 = wait_for(lambda: health(backend, node_id, 1).get("last_check") and health(backend, node_id, 1), 20)
        assert gpu1["reasons"] == ["PCIe link x8 of x16"] and gpu1["last_check"]["tool"] == "nvml"

        done = cli(env, "gpu", "check", "--gpu", gpus.gpus[0]["uuid"])  # from the host, through the backend
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert f"GPU 0 ({gpus.gpus[0]['uuid']}): pass" in done.stdout
        assert "gpu.check (nvml level 1): GPU 0 pass" in done.stdout
    finally:
        agent.stop()


def test_dcgm_s_diagnostic_fails_a_gpu_until_a_check_passes_in_both_json_forms(backend, own_engine, tmp_path):  # noqa: F811
    gpus = GpuState(tmp_path / "nvml", count=2)
    calls = tmp_path / "dcgmi-calls"
    gpus.dcgmi = {"fail": {"1": {"test": "memory", "error_id": 52, "warning": FAULTY}}, "log": str(calls)}
    gpus.write()
    agent, env, node_id = start_agent(backend, tmp_path / "agent", gpus, own_engine[0], dcgm=True)
    try:
        command = run(backend, node_id, "gpu.check", {"gpus": "all", "level": 2})
        end = outcome(command)
        assert (end["state"], end["reason"]) == ("failed", "check_failed"), end
        assert calls.read_text().splitlines() == ['["diag", "-r", "2", "-i", "0,1", "-j"]']
        (started,) = steps(command, "check_started")
        assert started["tool"] == "dcgm" and "diag -r 2" in started["tool_note"]
        tests = {(t["index"], t["name"]): t for t in steps(command, "test")}
        assert sorted({name for _, name in tests}) == ["memory", "pcie", "software"]
        failed = tests[(1, "memory")]
        assert (failed["result"], failed["detail"], failed["error_ids"]) == ("fail", FAULTY, [52])
        assert tests[(0, "memory")]["result"] == "pass"
        reason = f"DCGM diagnostic level 2 failed: memory: {FAULTY}"
        gpu1 = wait_for(
            lambda: reason in health(backend, node_id, 1).get("reasons", []) and health(backend, node_id, 1), 20
        )
        assert gpu1["verdict"] == "failed"
        assert health(backend, node_id, 0)["verdict"] == "ok"
        events = [r["data"] for r in backend.events(node_id) if r["data"].get("type") == "gpu.health_changed"]
        assert any(e["index"] == 1 and e["new"] == "failed" and reason in e["reasons"] for e in events)

        agent.stop()  # the failed check is kept in the evidence: a restart reports the same GPU
        agent.start()
        wait_for(lambda: health(backend, node_id, 1).get("verdict") == "failed", 20)

        gpus.dcgmi = {"format": "3"}  # DCGM 3.x's form, and nothing fails: the next check clears it
        gpus.write()
        command = run(backend, node_id, "gpu.check", {"gpus": [gpus.gpus[1]["uuid"]], "level": 1})
        end = outcome(command)
        assert (end["state"], end["result"]["outcome"]) == ("succeeded", "pass"), end
        assert [t["name"] for t in steps(command, "test")] == ["software"]
        wait_for(lambda: health(backend, node_id, 1).get("verdict") == "ok", 20, what="GPU 1 ok after a passing check")
    finally:
        agent.stop()


def test_a_busy_gpu_is_refused_and_with_allow_busy_checked_without_a_false_fault(backend, own_engine, tmp_path):  # noqa: F811
    gpus = GpuState(tmp_path / "nvml", count=3)
    engine, client = own_engine
    agent, env, node_id = start_agent(backend, tmp_path / "agent", gpus, engine, dcgm=True)
    name = "serving-on-gpu0"
    serving = on_gpus(client, TEST_IMAGE, name, "0", "exec sleep 600")
    outsider = subprocess.Popen(["sleep", "600"])  # a CUDA program run on the host, outside any container
    try:
        serving.reload()
        computes_on(gpus, 0, serving.attrs["State"]["Pid"])
        gpus.gpus[2]["compute"] = {"count": 1, "0": {"pid": outsider.pid, "used": 1 << 30}}
        gpus.write()
        uuid0, uuid2 = gpus.gpus[0]["uuid"], gpus.gpus[2]["uuid"]
        wait_for(lambda: _listed(backend, node_id, 2, outsider.pid), 20, what="the outsider in NVML's list")
        refused = outcome(run(backend, node_id, "gpu.check", {"gpus": "all", "level": 2}))
        assert (refused["state"], refused["reason"]) == ("failed", "gpu_in_use"), refused
        assert f"GPU 0 ({uuid0}) runs work: {name} (device ids)" in refused["message"]
        assert f"GPU 2 ({uuid2}) runs work: pid {outsider.pid} (sleep)" in refused["message"]

        command = run(backend, node_id, "gpu.check", {"gpus": "all", "level": 2, "allow_busy": True})
        end = outcome(command)
        assert end["state"] == "succeeded", end
        judged = end["result"]["gpus"]
        # the work holds the memory DCGM wanted (DCGM_FR_MEMORY_ALLOC): busy, not a fault
        assert (judged[uuid0]["outcome"], judged[uuid0]["counted"]) == ("inconclusive", False)
        assert judged[uuid0]["busy_with"] == [f"{name} (device ids)"]
        (memory,) = [t for t in judged[uuid0]["tests"] if t["name"] == "memory"]
        assert (memory["result"], memory["error_ids"], memory["busy"]) == ("fail", [56], True)
        assert judged[gpus.gpus[1]["uuid"]]["outcome"] == "pass"
        time.sleep(3)  # three rounds: the verdicts stay ok
        for index in (0, 1, 2):
            assert health(backend, node_id, index)["verdict"] == "ok", health(backend, node_id, index)
        assert health(backend, node_id, 0)["last_check"]["counted"] is False
        serving.reload()
        assert serving.status == "running"  # a check stops nothing
    finally:
        outsider.kill()
        outsider.wait()
        agent.stop()


def _listed(backend, node_id: str, index: int, pid: int) -> bool:  # noqa: F811
    found = [d for d in devices(backend, node_id) if d["index"] == index]
    return bool(found) and any(p["pid"] == pid for p in found[0].get("processes") or ())


def test_a_diagnostic_past_its_time_limit_is_ended_with_its_processes_and_dcgm_busy_is_no_fault(
    backend,  # noqa: F811
    own_engine,  # noqa: F811
    tmp_path,
):
    gpus = GpuState(tmp_path / "nvml", count=1)
    pids = tmp_path / "dcgmi-pids"
    gpus.dcgmi = {"hang_s": 600, "pids": str(pids)}
    gpus.write()
    agent, env, node_id = start_agent(backend, tmp_path / "agent", gpus, own_engine[0], dcgm=True)
    try:
        started = time.monotonic()
        end = outcome(run(backend, node_id, "gpu.check", {"level": 1, "time_limit_s": 3}))
        took = time.monotonic() - started
        assert (end["state"], end["reason"]) == ("failed", "timeout"), end
        assert "did not end within the time limit" in end["message"]
        leader, child = (int(p) for p in pids.read_text().split())
        assert not pid_alive(leader) and not pid_alive(child)  # the whole group ended
        print(f"gpu.check past a 3 s time limit: ended in {took:.1f} s")

        pids.unlink()
        gpus.dcgmi = {"hang_s": 600, "pids": str(pids), "stubborn": 1}  # SIGTERM ignored: killed after its grace
        gpus.write()
        end = outcome(run(backend, node_id, "gpu.check", {"level": 1, "time_limit_s": 2}))
        assert end["reason"] == "timeout", end
        leader, child = (int(p) for p in pids.read_text().split())
        assert not pid_alive(leader) and not pid_alive(child)

        gpus.dcgmi = {"runtime_error": "in_use"}  # another diagnostic holds DCGM (DCGM_ST_IN_USE)
        gpus.write()
        end = outcome(run(backend, node_id, "gpu.check", {"level": 1}))
        assert (end["state"], end["reason"]) == ("failed", "busy"), end
        assert "not a GPU fault" in end["message"] and "affected resource is in use" in end["message"]
        assert health(backend, node_id, 0)["verdict"] == "ok"
    finally:
        agent.stop()
