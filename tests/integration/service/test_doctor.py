"""`faden-agent doctor` against a healthy node and a broken one.

Healthy: a TLS backend with a private CA, an enrolled agent, the real Docker engine.
Broken: the wrong CA, a Docker address with no engine behind it (not a stopped shared
dockerd), a state file readable by others. Each failing check names its cause.
No GPU exists here: the NVML and NVIDIA-runtime checks warn, which is not a failure.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from faden_agent.engine.versions import CLIENT_MAX_API
from faden_agent.workers.executor.gpu import GPU_ADVICE
from tests.conftest import ENGINE_UNDER_TEST
from tests.nvml.state import GpuState
from tests.support.agentproc import AgentProcess
from tests.support.backendproc import BackendProcess, agent_env_for
from tests.support.privateca import make_ca_and_server_cert, without_ca_overrides

pytestmark = pytest.mark.docker

# The engine's version, the API version in use with the engine's range, and its image store.
ENGINE_LINE = {
    "20.10": "API 1.41 (engine 1.12-1.41), classic image store",
    "29": f"API {CLIENT_MAX_API} (engine 1.44-1.52), containerd image store",
}
MUST_BE_OK = [
    "backend dns",
    "backend tcp",
    "backend tls",
    "clock skew",
    "state file",
    "credential",
    "docker",
    "journald",
    "log path",
    "disk (state)",
    "disk (docker)",
]


def doctor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "faden_agent", "doctor", *args], env=env, capture_output=True, text=True, timeout=120
    )


def by_name(done: subprocess.CompletedProcess) -> dict[str, dict]:
    return {c["name"]: c for c in orjson.loads(done.stdout)["checks"]}


@pytest.fixture
def enrolled(tmp_path, docker_client):
    """A TLS backend with a private CA and an agent enrolled with it (then stopped)."""
    ca, cert, key = make_ca_and_server_cert(tmp_path)
    backend = BackendProcess(tmp_path / "data", tmp_path / "backend.log", tls_cert=cert, tls_key=key, ca_bundle=ca)
    backend.start()
    env = without_ca_overrides(agent_env_for(backend, tmp_path, ca_bundle=str(ca)))
    agent = AgentProcess(env, tmp_path / "agent.log").start()
    try:
        backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])
        agent.stop()
        env.pop("FADEN_NODE_AGENT_ENROLLMENT_TOKEN")  # spent
        yield env, backend, tmp_path
    finally:
        agent.stop()
        agent.kill()
        backend.stop()


def test_healthy_node_has_no_failure(enrolled):
    env, _, _ = enrolled
    done = doctor(env, "--json")
    checks = by_name(done)
    assert done.returncode == 0, done.stdout
    assert {name: checks[name]["status"] for name in MUST_BE_OK} == {name: "ok" for name in MUST_BE_OK}, done.stdout
    assert "verified with CA bundle" in checks["backend tls"]["detail"]
    assert ENGINE_LINE[ENGINE_UNDER_TEST] in checks["docker"]["detail"], checks["docker"]
    assert checks["nvml"]["status"] == "warn"  # no GPU on this machine
    assert orjson.loads(done.stdout)["result"] in ("ok", "warn")
    text = doctor(env)
    assert text.returncode == 0
    assert any(line.startswith("ok    credential") for line in text.stdout.splitlines())


def test_broken_node_names_each_cause(enrolled, tmp_path):
    env, _, root = enrolled
    other = root / "other-ca"
    other.mkdir()
    wrong_ca, _, _ = make_ca_and_server_cert(other)
    no_engine = tmp_path / "no-engine.sock"
    state = Path(env["FADEN_NODE_AGENT_STATE_PATH"])
    state.chmod(0o644)
    broken = {**env, "FADEN_NODE_AGENT_CA_BUNDLE": str(wrong_ca), "FADEN_NODE_AGENT_DOCKER_HOST": f"unix://{no_engine}"}
    done = doctor(broken, "--json")
    checks = by_name(done)
    assert done.returncode == 1
    assert checks["backend tls"]["status"] == "fail"
    assert f"not trusted with CA bundle {wrong_ca}" in checks["backend tls"]["detail"]
    assert "FADEN_NODE_AGENT_CA_BUNDLE" in checks["backend tls"]["hint"]
    assert checks["docker"]["status"] == "fail"
    assert str(no_engine) in checks["docker"]["detail"]
    assert "FADEN_NODE_AGENT_DOCKER_HOST" in checks["docker"]["hint"]
    assert checks["state file"]["status"] == "fail" and "mode 0644" in checks["state file"]["detail"]
    assert checks["credential"]["status"] == "fail" and "TLS" in checks["credential"]["detail"]
    assert checks["backend dns"]["status"] == "ok" and checks["backend tcp"]["status"] == "ok"
    text = doctor(broken).stdout
    assert "fail  backend tls" in text and "-> point FADEN_NODE_AGENT_CA_BUNDLE" in text


def test_doctor_never_prints_the_credential(enrolled):
    env, _, _ = enrolled
    credential = orjson.loads(Path(env["FADEN_NODE_AGENT_STATE_PATH"]).read_bytes())["credential"]
    done = doctor(env, "--json")
    assert credential not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        ({"init_error": 18}, "gpu_driver_mismatch"),  # NVML_ERROR_LIB_RM_VERSION_MISMATCH: driver upgraded
        ({"init_error": 9}, "gpu_driver_not_loaded"),  # NVML_ERROR_DRIVER_NOT_LOADED
        ({"lost": 1}, "gpu_lost"),  # GPU 1 fell off the bus: every call on it is GPU_IS_LOST
    ],
)
def test_nvidia_driver_failures_are_named_by_cause_with_what_to_do(env, tmp_path, setup, reason):
    gpus = GpuState(tmp_path / "nvml", count=2)
    if "lost" in setup:
        gpus.gpus[setup["lost"]]["lost"] = 1
    else:
        gpus.top.update(setup)
    gpus.write()
    check = by_name(doctor({**env, **gpus.env()}, "--json"))["nvml"]
    assert (check["status"], check["hint"]) == ("fail", GPU_ADVICE[reason]), check
    assert reason in check["detail"]


def test_the_gpu_section_names_each_gpu_its_verdict_and_what_to_do(env, tmp_path):
    gpus = GpuState(tmp_path / "nvml", count=2)
    gpus.gpus[1]["remap"]["pending"] = 1
    gpus.gpus[1]["persistence"] = 0
    gpus.gpus[1]["fabric"]["state"] = 2  # in progress: the fabric manager has not finished
    gpus.write()
    checks = by_name(doctor({**env, **gpus.env()}, "--json"))
    assert checks["gpu driver"]["detail"] == "driver 550.54.15, NVML 12.550.54.15, CUDA 12.4"
    zero, one = checks["gpu 0"], checks["gpu 1"]
    assert zero["status"] == "ok" and zero["detail"] == (
        "NVIDIA H100 80GB HBM3 GPU-00000000-fake 00000000:17:00.0: ok; persistence on, fabric completed"
    )
    assert one["status"] == "warn" and "row remap pending: reset needed" in one["detail"]
    assert "persistence mode off" in one["detail"] and "fabric in_progress" in one["detail"]
    assert checks["fabric manager"] == {**checks["fabric manager"], "status": "ok"}
    assert checks["fabric manager"]["detail"] == "active (running), version 550.54.15 (the driver's)"
    assert one["hint"].startswith("reset needed")

    gpus.gpus[1]["hang_ms"] = {"nvmlDeviceGetFieldValues": 30_000}  # a driver that stopped answering
    gpus.write()
    started = time.monotonic()
    done = doctor({**env, **gpus.env()}, "--json")
    hung = by_name(done)["gpus"]
    assert hung["status"] == "fail" and hung["detail"].startswith("NVML call hung on GPU 1: nvmlDeviceGetFieldValues")
    assert time.monotonic() - started < 25  # bounded by the check's timeout, not the hang


def test_doctor_says_where_the_kernel_lines_come_from_and_a_stopped_fabric_manager(env, tmp_path):
    gpus = GpuState(tmp_path / "nvml", count=1)
    gpus.fabric_manager.update(ActiveState="inactive", SubState="dead")
    gpus.write()
    no_journal = tmp_path / "no-journal"
    no_journal.mkdir()
    kmsg = tmp_path / "kmsg"
    kmsg.write_bytes(b"6,1,1,-;Linux version\n")
    base = {**env, **gpus.env(), "FADEN_NODE_AGENT_JOURNAL_DIRECTORY": str(no_journal)}
    checks = by_name(doctor({**base, "FADEN_NODE_AGENT_KMSG_PATH": str(kmsg)}, "--json"))
    assert checks["kernel log"]["status"] == "ok"
    assert checks["kernel log"]["detail"] == f"Xid lines from {kmsg} (no journal files in {no_journal})"
    assert checks["fabric manager"]["status"] == "fail"
    assert checks["fabric manager"]["detail"] == "fabric manager not running (nvidia-fabricmanager: inactive (dead))"
    checks = by_name(doctor({**base, "FADEN_NODE_AGENT_KMSG_PATH": str(tmp_path / "none")}, "--json"))
    assert checks["kernel log"]["status"] == "warn"
    assert checks["kernel log"]["detail"] == (
        f"no kernel log: no journal files in {no_journal}; {tmp_path / 'none'}: No such file or directory: "
        "GPU faults of the kernel log not seen"
    )
