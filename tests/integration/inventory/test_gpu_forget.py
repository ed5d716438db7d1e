"""`faden-agent gpu forget UUID` end to end: a GPU taken out for good leaves the node failed
(`missing`) until the operator on the host acknowledges it; the request goes over the real
agent's link to the real reference backend, whose gpu.forget command the executor answers by
asking the inventory worker's door. A GPU still there is refused with the reason; the backend
may send the command itself; the agent says it knows it (capability gpu.forget)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from faden_agent import protocol
from tests.nvml.state import GpuState
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import agent_env_for, backend  # noqa: F401 - the fixture

pytestmark = pytest.mark.docker


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "faden_agent", *args], env=env, capture_output=True, text=True, timeout=60
    )


def gpu_section(backend, node_id: str) -> dict[str, Any] | None:
    inventory = backend.inventory(node_id).get("inventory") or {}
    return inventory.get("gpu")


def test_a_gpu_removed_for_good_is_forgotten_from_the_host_and_a_present_one_is_not(backend, tmp_path):  # noqa: F811
    gpus = GpuState(tmp_path / "nvml", count=3)
    env = agent_env_for(backend, tmp_path, inventory_interval_sec=1, inventory_usage_sec=1)
    env.update(gpus.env())
    agent = AgentProcess(env, tmp_path / "agent.log").start()
    try:
        node = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])
        node_id = node["node_id"]
        assert protocol.GPU_FORGET_CAPABILITY in backend.admin.node(node_id)["capabilities"]
        wait_for(lambda: (gpu_section(backend, node_id) or {}).get("devices"), 20, what="the first gpu section")
        gone = gpus.gpus[2]["uuid"]
        gpus.top["count"] = 2  # GPU 2 taken out of the machine (an RMA)
        gpus.write()
        section = wait_for(lambda: (gpu_section(backend, node_id) or {}).get("missing"), 20, what="GPU 2 missing")
        assert section[0]["uuid"] == gone
        assert gpu_section(backend, node_id)["health"]["verdict"] == "failed"

        refused = cli(env, "gpu", "forget", gpus.gpus[0]["uuid"])  # still there
        assert refused.returncode == 1, (refused.stdout, refused.stderr)
        assert "failed (gpu_present)" in refused.stderr and "only a GPU gone can be forgotten" in refused.stderr

        done = cli(env, "gpu", "forget", gone)
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert f"{gone} (last GPU 2 at 00000000:19:00.0) forgotten" in done.stdout

        def forgotten() -> dict[str, Any] | None:
            section = gpu_section(backend, node_id) or {}
            return section if section.get("health", {}).get("verdict") == "ok" and "missing" not in section else None

        wait_for(forgotten, 20, what="the node ok without the GPU")
        events = [r["data"] for r in backend.events(node_id) if r["data"].get("type") == "gpu.forgotten"]
        assert [(e["uuid"], e["by"]) for e in events] == [(gone, "operator")]

        unknown = cli(env, "gpu", "forget", gone)  # forgotten already: never seen any more
        assert unknown.returncode == 1 and "failed (not_found)" in unknown.stderr
        bad = cli(env, "gpu", "forget", "not-a-uuid")
        assert bad.returncode == 2 and "is no GPU uuid" in bad.stderr

        # the backend may send it on its own (an operator in its console)
        command_id = backend.send_command(node_id, "gpu.forget", {"uuid": gpus.gpus[1]["uuid"]})

        def terminal() -> dict[str, Any] | None:
            timeline = backend.command(command_id).get("timeline") or []
            return next((r for r in timeline if r["state"] in protocol.TERMINAL_STATES), None)

        outcome = wait_for(terminal, 20, what="the command's outcome")
        assert (outcome["state"], outcome["reason"]) == ("failed", "gpu_present"), outcome
    finally:
        agent.stop()
        agent.kill()
