"""gpu.reset in a real agent at the real reference backend, on tests/nvml's C GPUs, a Docker engine
of the test's own, the real Lokis (2.8, 3.4) and the stand-in nvidia-smi (tests/nvml/nvidia-smi: its words and
exit codes, and its refusal while anything holds the GPU, the agent's own NVML included): refused
while a container uses the GPU; done from the host with --stop-containers, stopping only that
GPU's container (its last lines in Loki, not restarted), the others untouched, persistence mode
off and on again, the Xid 48 hold ended by the agent's own reset and check, while heartbeats and
another GPU's live events go on; failing resets with their cause and next remedy; a reset that
hangs ended with its process group."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faden_agent import protocol
from tests.conftest import TEST_IMAGE
from tests.nvml.state import GpuState
from tests.support.agentproc import pid_alive, wait_for
from tests.support.backendproc import backend  # noqa: F401 - the fixture
from tests.support.gpuagent import kmsg_record
from tests.support.gpuremedy import (
    devices,
    health,
    on_gpus,
    outcome,
    own_engine,  # noqa: F401 - the fixture
    run,
    start_agent,
    steps,
)
from tests.support.lokiproc import real_loki  # noqa: F401 - the fixture, one Loki per version

pytestmark = pytest.mark.docker

# numbered lines to stdout and to /c/<name> (what Loki must hold); a last line on SIGTERM
POLITE = (
    'trap "echo $N bye; echo $N bye >> /c/$N; exit 0" TERM; '
    'i=0; while true; do i=$((i+1)); echo "$N line $i"; echo "$N line $i" >> /c/$N; sleep 0.02; done'
)
XID_48 = "Xid 48: double-bit ECC error (reset needed)"


def calls(path: Path) -> list[list[str]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_reset_refused_while_used_then_done_stopping_only_that_gpu_s_container(
    backend, real_loki, own_engine, tmp_path
):  # noqa: F811
    gpus = GpuState(tmp_path / "nvml", count=3)
    uuid1, bus1 = gpus.gpus[1]["uuid"], gpus.gpus[1]["bus_id"]
    gpus.gpus[1]["ecc"]["corrected"]["volatile"] = 0  # nothing NVML would show of a reset: the agent knows it
    smi_calls = tmp_path / "smi-calls"
    gpus.smi = {"log": str(smi_calls), "hang_s": 4}  # a reset of 4 s: the window the other GPUs go on in
    gpus.write()
    kmsg = tmp_path / "kmsg"
    kmsg.write_bytes(kmsg_record(1, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module"))
    no_journal = tmp_path / "no-journal"
    no_journal.mkdir()
    printed = tmp_path / "printed"
    printed.mkdir(mode=0o777)
    engine, client = own_engine
    agent, env, node_id = start_agent(
        backend,
        tmp_path / "agent",
        gpus,
        engine,
        loki_url=real_loki.url,
        log_flush_interval_sec=0.2,
        kmsg_path=kmsg,
        journal_directory=no_journal,
    )
    agent_id = env["FADEN_NODE_AGENT_AGENT_ID"]
    ours = {protocol.LABEL_AGENT_ID: agent_id}
    mounts = {str(printed): {"bind": "/c", "mode": "rw"}}
    named = {}
    try:
        for name, gpu in (("on-gpu1", "1"), ("on-gpu0", "0"), ("on-gpu2", "2")):
            named[name] = on_gpus(
                client, TEST_IMAGE, name, gpu, POLITE, labels=ours, environment={"N": name}, volumes=mounts
            )
        wait_for(lambda: all((printed / n).exists() for n in named), 30, what="every container printing")
        started = {n: c.attrs["State"]["StartedAt"] for n, c in ((n, client.containers.get(n)) for n in named)}
        gpus.xid(1, 48)  # a double-bit ECC error: failed until the GPU is reset
        wait_for(lambda: XID_48 in health(backend, node_id, 1).get("reasons", []), 20, what="GPU 1 failed")

        refused = outcome(run(backend, node_id, "gpu.reset", {"gpu": uuid1}))
        assert (refused["state"], refused["reason"]) == ("failed", "gpu_in_use"), refused
        assert "is used by containers on-gpu1 (device ids)" in refused["message"]
        assert calls(smi_calls) == []  # nothing was tried
        assert all(client.containers.get(n).status == "running" for n in named)

        beats_before = len(backend.heartbeats(node_id))
        host = subprocess.Popen(
            [sys.executable, "-m", "faden_agent", "gpu", "reset", uuid1, "--stop-containers", "--deadline", "90s"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # while nvidia-smi resets GPU 1, GPU 2's Xid 94 comes through the kernel's log
        wait_for(lambda: ["--gpu-reset", "-i", bus1] in calls(smi_calls), 60, what="the reset running")
        inventory = lambda: agent.workers()["inventory"]["status"]  # noqa: E731
        wait_for(lambda: inventory()["gpu_events"]["let_go"], 3, what="NVML let go (ps)")
        with open(kmsg, "ab") as fh:
            line = f"NVRM: Xid (PCI:{gpus.gpus[2]['bus_id'][4:-2].lower()}): 94, pid=77, name=python3, Contained"
            fh.write(kmsg_record(2, line))
        out, err = host.communicate(timeout=120)
        assert host.returncode == 0, (out, err, agent.log_text()[-3000:])
        print(out)
        assert f"GPU 1 ({bus1}) reset; NVML read it again after" in out
        assert "on-gpu1: exited (exit code 0)" in out and "on-gpu0" not in out and "on-gpu2" not in out

        # only that GPU's container stopped, not removed, not restarted; its last lines in Loki
        assert client.containers.get("on-gpu1").status == "exited"
        for name in ("on-gpu0", "on-gpu2"):
            container = client.containers.get(name)
            assert (container.status, container.attrs["State"]["StartedAt"]) == ("running", started[name])
        got = set(real_loki.lines(f'{{agent_id="{agent_id}", container="on-gpu1"}}'))
        want = (printed / "on-gpu1").read_text().splitlines()
        assert [line for line in want if line not in got] == [] and "on-gpu1 bye" in got

        # persistence mode off for the reset and on again; NVML let go around it and taken again
        assert calls(smi_calls) == [["-pm", "0", "-i", bus1], ["--gpu-reset", "-i", bus1], ["-pm", "1", "-i", bus1]]
        gpus.read_back()
        assert gpus.gpus[1]["persistence"] == 1
        inventory_pid = agent.workers()["inventory"]["pid"]
        wait_for(lambda: inventory_pid in gpus.clients(), 10, what="NVML taken again")

        command_id = f"host-{out.split('(request ', 1)[1].split(')', 1)[0]}"
        command = backend.command(command_id)
        phases = [r.get("phase") for r in steps(command)]
        order = ["stopped", "lines_shipped", "persistence_off", "nvml_let_go", "resetting", "persistence_on"]
        order += ["reset_done", "nvml_reads_again", "check_started", "test", "gpu_checked"]
        assert [p for p in dict.fromkeys(phases) if p in order] == order, phases
        window = [r["ts"] for r in steps(command) if r.get("phase") in ("resetting", "reset_done")]
        assert window[1] - window[0] >= 3.5

        # the hold ended by the agent's own reset and level-1 check: ok again
        gpu1 = wait_for(lambda: health(backend, node_id, 1).get("verdict") == "ok" and health(backend, node_id, 1), 20)
        assert gpu1["last_reset"]["sign"] == f"reset by the agent (gpu.reset {command_id}), level-1 check pass"
        assert gpu1["last_check"]["tool"] == "nvml" and gpu1["last_check"]["outcome"] == "pass"

        # the other GPUs went on: GPU 2's event during the reset, heartbeats throughout
        events = [r["data"] for r in backend.events(node_id) if r["data"].get("type") == "gpu.health_changed"]
        (degraded,) = [e for e in events if e["index"] == 2]
        assert degraded["new"] == "degraded" and window[0] <= degraded["at"] <= window[1], (degraded, window)
        beats = [h["ts"] for h in backend.heartbeats(node_id)[beats_before:]]
        assert len([t for t in beats if window[0] <= t <= window[1]]) >= 2, (beats, window)
        assert devices(backend, node_id)[0]["health"]["verdict"] == "ok"
    finally:
        agent.stop()


def test_failing_resets_say_their_cause_and_the_next_remedy(backend, own_engine, tmp_path):  # noqa: F811
    gpus = GpuState(tmp_path / "nvml", count=3)
    gpus.gpus[2]["cc_major"] = 8  # an Ampere GPU on an NVSwitch fabric whose fabric manager is stopped
    gpus.fabric_manager["ActiveState"], gpus.fabric_manager["SubState"] = "inactive", "dead"
    gpus.smi = {"primary": gpus.gpus[0]["bus_id"]}
    gpus.write()
    agent, env, node_id = start_agent(backend, tmp_path / "agent", gpus, own_engine[0])
    uuids = [g["uuid"] for g in gpus.gpus]
    try:
        end = outcome(run(backend, node_id, "gpu.reset", {"gpu": uuids[0]}))
        assert (end["state"], end["reason"]) == ("failed", "reset_failed"), end
        assert "GPU Reset couldn't run because GPU 00000000:17:00.0 is the primary GPU." in end["message"]
        assert (end["cause"], end["next"]) == (
            "primary_gpu",
            "the display's GPU cannot be reset while the machine runs: reboot",
        )
        inventory_pid = agent.workers()["inventory"]["pid"]
        wait_for(lambda: inventory_pid in gpus.clients(), 10, what="NVML taken again after the failed reset")

        end = outcome(run(backend, node_id, "gpu.reset", {"gpu": uuids[2]}))
        assert (end["state"], end["reason"]) == ("failed", "reset_blocked"), end
        assert "on an Ampere NVSwitch system a GPU is reset alone only while the fabric manager runs" in end["message"]

        # another NVML client holds the GPUs (a monitoring program): the tool refuses, in its words
        monitor = subprocess.Popen(
            [sys.executable, "-c", "import pynvml, time; pynvml.nvmlInit(); time.sleep(600)"],
            env={**env, **gpus.env()},
        )
        try:
            wait_for(lambda: monitor.pid in gpus.clients(), 10, what="the monitor holding NVML")
            end = outcome(run(backend, node_id, "gpu.reset", {"gpu": uuids[1]}))
            assert (end["reason"], end["cause"]) == ("reset_failed", "in_use"), end
            assert f"GPU {gpus.gpus[1]['bus_id']}: In use by another client" in end["message"]
            assert "next: stop what holds the GPU" in end["message"]
        finally:
            monitor.kill()
            monitor.wait()

        gpus.read_back()  # the stand-in turned persistence off and on: keep its state
        gpus.smi = {"keep_failing": 1}  # the reset "succeeds" but the GPU does not come back
        gpus.write()
        end = outcome(run(backend, node_id, "gpu.reset", {"gpu": uuids[1], "deadline_s": 40}, timeout_s=60))
        assert (end["reason"], end["cause"]) == ("reset_failed", "not_back"), end
        assert "was reset but NVML did not read it again" in end["message"]
        gpu1 = wait_for(
            lambda: health(backend, node_id, 1).get("verdict") == "failed" and health(backend, node_id, 1), 20
        )
        assert gpu1["reasons"] == ["NVML: Unknown Error on every call"]
    finally:
        agent.stop()


def test_a_reset_that_hangs_is_ended_with_its_process_group(backend, own_engine, tmp_path):  # noqa: F811
    gpus = GpuState(tmp_path / "nvml", count=2)
    gpus.gpus[0]["persistence"] = 0
    gpus.smi = {"hang_s": 600}
    gpus.write()
    agent, env, node_id = start_agent(backend, tmp_path / "agent", gpus, own_engine[0])
    try:
        started = time.monotonic()
        end = outcome(run(backend, node_id, "gpu.reset", {"gpu": gpus.gpus[0]["uuid"], "deadline_s": 45}, timeout_s=60))
        took = time.monotonic() - started
        assert (end["state"], end["reason"], end["cause"]) == ("failed", "reset_failed", "hung"), end
        assert "did not end within" in end["message"] and end["next"] == "reboot"
        print(f"gpu.reset hanging, deadline 45 s: ended in {took:.1f} s")
        left = subprocess.run(["pgrep", "-f", "sleep 600"], capture_output=True, text=True).stdout.split()
        ours = [p for p in left if Path(f"/proc/{p}/environ").exists() and _of(int(p), gpus)]
        assert ours == []
        inventory_pid = agent.workers()["inventory"]["pid"]
        wait_for(lambda: inventory_pid in gpus.clients(), 10, what="NVML taken again")
        assert agent.workers()["inventory"]["state"] == "RUNNING"
    finally:
        agent.stop()


def _of(pid: int, gpus: GpuState) -> bool:
    """Whether a process was started with this test's stand-in state (one of its programs)."""
    try:
        return str(gpus.smi_path).encode() in Path(f"/proc/{pid}/environ").read_bytes() and pid_alive(pid)
    except OSError:
        return False
