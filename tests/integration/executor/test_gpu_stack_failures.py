"""The NVIDIA container stack's failures, each with its own reason and what to do, through a
real engine (20.10 and 29): an engine finding `nvidia-container-runtime-hook` on its PATH
registers the "nvidia" device driver and runs that hook before a GPU container starts, as
on a GPU host. The hook here (no GPU exists) prints what nvidia-container-cli prints on
such hosts (texts from NVIDIA/nvidia-container-toolkit issues) and fails, as the real one does."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from faden_agent.workers.executor.gpu import GPU_ADVICE
from tests.conftest import TEST_IMAGE, require
from tests.support.engine29 import Engine29, missing_piece
from tests.support.executorproc import executor_factory, prefix  # noqa: F401
from tests.support.privateengine import PrivateEngine

pytestmark = pytest.mark.docker

# What nvidia-container-cli writes to stderr, by the reason it must end with.
TEXTS = {
    # after an unattended driver upgrade (NVIDIA/nvidia-container-toolkit#394)
    "gpu_driver_mismatch": "nvidia-container-cli: initialization error: nvml error: driver/library version mismatch",
    # the kernel module is not loaded (#1269)
    "gpu_driver_not_loaded": "nvidia-container-cli: initialization error: nvml error: driver not loaded",
    # a GPU that fell off the bus: nvidia-smi shows ERR! (NVIDIA/nvidia-docker#1280)
    "gpu_lost": "nvidia-container-cli: detection error: nvml error: unknown error",
    # a device index or UUID this machine does not have (NVIDIA/nvidia-docker#1264)
    "gpu_device_missing": "nvidia-container-cli: device error: 3: unknown device",
    # anything else of the toolkit's (NVIDIA/nvidia-docker#1660)
    "gpu_runtime_failed": "nvidia-container-cli: container error: cgroup subsystem devices not found",
}
HOOK = """#!/bin/sh
# nvidia-container-runtime-hook prestart: what the real one does when nvidia-container-cli fails
cat "$(dirname "$0")/says" >&2
exit 1
"""


def fake_hook(folder: Path) -> Path:
    folder.mkdir(parents=True)
    hook = folder / "nvidia-container-runtime-hook"
    hook.write_text(HOOK)
    hook.chmod(0o755)
    return folder


@pytest.mark.parametrize("engine", ["20.10", "29"])
def test_each_nvidia_stack_failure_has_its_own_reason(executor_factory, prefix, engine, docker_client):
    if engine == "29" and missing_piece():
        require("Docker Engine 29", missing_piece() or "")
    root = Path(tempfile.mkdtemp(prefix="fxgpu-", dir="/tmp"))  # a short socket path
    hooks = fake_hook(root / "bin")
    private = (
        Engine29(root / "e29", path_prefix=hooks)
        if engine == "29"
        else PrivateEngine(root / "e20", TEST_IMAGE, path_prefix=hooks)
    )
    with private:
        agent, ex = executor_factory(docker_host=private.host)
        for reason, text in TEXTS.items():
            (hooks / "says").write_text(text + "\n")
            name = f"{prefix}-{reason.replace('_', '-')}"
            spec = {"name": name, "image": TEST_IMAGE, "command": ["true"], "network_mode": "none", "gpus": "all"}
            done = ex.run(f"{prefix}-{reason}", "container.run", spec, timeout_s=60)
            assert (done["state"], done["reason"]) == ("failed", reason), done
            assert GPU_ADVICE[reason] in done["message"] and text in done["message"], done
            assert not private.docker("ps", "-aq", "--filter", f"name={name}").stdout.strip()  # nothing half-made
