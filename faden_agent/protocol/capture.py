"""The wire shapes of a capture (evidence at a stall, docs/inventory.md): the `capture` a
workload.stalled or container.die event carries, and the executor's question to the
inventory about a serving container's hardware death."""

from __future__ import annotations

from typing import NotRequired, TypedDict


class CaptureGpu(TypedDict):
    index: int
    uuid: str | None
    verdict: str | None  # ok, degraded, failed; None where the GPU's read failed


class CaptureSummary(TypedDict):
    id: str  # the capture's entry in Loki carries it as capture_id
    stacks: str | None  # ok, cannot_attach, not_python, no_python, no_process, no_py_spy, timeout, too_large, failed
    reason: str | None  # why the stacks are not ok, in py-spy's words where it said any
    thread: str | None  # the busiest thread
    pid: int | None  # its process, as the host numbers it
    top_frames: list[str]  # its innermost frames first, "function (file:line)"
    gpus: list[CaptureGpu]
    error: NotRequired[str]  # the capture itself failed (e.g. a full disk)


class CaptureRefused(TypedDict):
    id: str | None  # the capture taken earlier of the same event, if any
    reason: str


class CaptureQuestion(TypedDict):
    record_id: str  # the death event's: its capture's id derives from it
    container_id: str
    name: str | None
    cluster: str | None
    workload: str | None
    time: float
    gpus: list[dict]  # [{"index", "uuid"}] as the death's cause placed them
