"""A real agent on tests/nvml's C GPUs, and what it wrote to its outbox: the inventory records'
gpu sections and the GPU events (tests/integration/inventory/test_gpu_*.py); a line of the
kernel's log as /dev/kmsg gives it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from faden_agent import protocol
from tests.nvml.state import GpuState
from tests.support.agentproc import AgentProcess, agent_env, wait_for
from tests.support.outboxevents import outbox_rows


def records(state_dir: Path, kind: str) -> list[dict[str, Any]]:
    return outbox_rows(state_dir, kind)


def gpu_events(state_dir: Path, kind: str = "gpu.health_changed") -> list[dict[str, Any]]:
    return [e for e in records(state_dir, protocol.EVENT) if e.get("type") == kind]


def health_events(state_dir: Path) -> list[dict[str, Any]]:
    return gpu_events(state_dir)


def newest_gpu(state_dir: Path) -> dict[str, Any] | None:
    full = [r for r in records(state_dir, protocol.INVENTORY) if r["type"] == "full"]
    return full[-1]["gpu"] if full else None


def start(
    tmp_path: Path, agent_factory: Any, gpus: GpuState, **settings: Any
) -> tuple[AgentProcess, Path, dict[str, Any]]:
    """An agent (inventory rounds every second unless `settings` say otherwise) and its first gpu section."""
    env = agent_env(tmp_path, **{"inventory_interval_sec": 1, "inventory_usage_sec": 1, **settings})
    env.update(gpus.env())
    agent = agent_factory(env).start()
    state_dir = tmp_path / "state"
    first = wait_for(lambda: newest_gpu(state_dir), 30, what="a first inventory record")
    return agent, state_dir, first


def kmsg_record(seq: int, text: str) -> bytes:
    """One record as /dev/kmsg reads it (priority 3, the sequence number, monotonic usec)."""
    usec = int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6)
    return f"3,{seq},{usec},-;{text}\n SUBSYSTEM=pci\n".encode()
