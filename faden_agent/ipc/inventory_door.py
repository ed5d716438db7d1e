"""The inventory worker's door: the typed requests other processes (the executor, the CLI) ask of
it on its REP socket (Endpoints.inventory), since it alone holds NVML and the GPU evidence. A
request is the message type (a DoorKind) and its body; the answer comes back under the same
type, or `error` with a message. `ask` is the client; None when no inventory worker answers.
A remedy (check, reset) is a job: started, then read step by step until it ends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypedDict

from faden_agent.ipc.endpoints import Endpoints
from faden_agent.ipc.sockets import request
from faden_agent.protocol.capture import CaptureQuestion, CaptureRefused, CaptureSummary

DoorKind = Literal[
    "gpu.forget", "gpu.evidence", "capture", "gpu.users", "gpu.check", "gpu.reset", "gpu.job", "gpu.cancel"
]
GPU_FORGET: DoorKind = "gpu.forget"  # acknowledge a GPU removed for good
GPU_EVIDENCE: DoorKind = "gpu.evidence"  # the GPU evidence as it is in memory now (death causes)
CAPTURE: DoorKind = "capture"  # a serving container died of a hardware cause: capture its evidence
GPU_USERS: DoorKind = "gpu.users"  # each GPU's index, bus id and the processes NVML listed on it last
GPU_CHECK: DoorKind = "gpu.check"  # start a check of GPUs (a remedy job)
GPU_RESET: DoorKind = "gpu.reset"  # start a reset of one GPU (a remedy job)
GPU_JOB: DoorKind = "gpu.job"  # a remedy job's steps since a position, and its end once it ended
GPU_CANCEL: DoorKind = "gpu.cancel"  # end a remedy job now (its programs' process groups with it)
KINDS: tuple[str, ...] = (GPU_FORGET, GPU_EVIDENCE, CAPTURE, GPU_USERS, GPU_CHECK, GPU_RESET, GPU_JOB, GPU_CANCEL)
ERROR = "error"
ASK_TIMEOUT_S = 2.0


class ForgetRequest(TypedDict):
    uuid: str


class ForgetAnswer(TypedDict):
    outcome: Literal["forgotten", "unknown", "present", "busy"]
    message: str


class EvidenceRequest(TypedDict):
    uuids: list[str] | None  # None: every GPU


class EvidenceAnswer(TypedDict):
    gpus: dict[str, dict[str, object]]  # uuid -> its evidence, as gpu-evidence.json holds it


class CaptureAnswer(TypedDict):
    capture: CaptureSummary | CaptureRefused  # the death event's `capture`


class UsersRequest(TypedDict):
    uuids: list[str] | None  # None: every GPU


class GpuProcess(TypedDict):
    pid: int
    name: str | None
    container_id: str | None  # None: outside any container


class GpuUse(TypedDict):
    index: int
    pci_bus_id: str | None
    processes: list[GpuProcess]


class UsersAnswer(TypedDict):
    gpus: dict[str, GpuUse]  # uuid -> its use, for the GPUs NVML named in the last read
    read: bool  # false until the worker's first NVML read (just started): ask again


class CheckRequest(TypedDict):
    uuids: list[str]
    level: int  # DCGM's -r level, 1 to 4
    time_limit_s: float
    busy: dict[str, list[str]]  # uuid -> what runs on it (allowed): its failures are not faults
    command_id: str


class ResetRequest(TypedDict):
    uuid: str
    time_limit_s: float
    command_id: str


class StartAnswer(TypedDict):
    outcome: Literal["started", "unknown", "busy"]
    job: str | None
    message: str


class JobRequest(TypedDict):
    job: str
    since: int  # the steps from this position on


class JobEnd(TypedDict):
    ok: bool
    reason: str  # protocol.REASONS ("ok" when it succeeded)
    message: str
    result: dict[str, Any]


class JobAnswer(TypedDict):
    state: Literal["running", "done", "unknown"]
    steps: list[dict[str, Any]]
    next: int
    end: JobEnd | None


class CancelRequest(TypedDict):
    job: str


class CancelAnswer(TypedDict):
    cancelled: bool


class ErrorAnswer(TypedDict):
    message: str


Request = (
    ForgetRequest
    | EvidenceRequest
    | CaptureQuestion
    | UsersRequest
    | CheckRequest
    | ResetRequest
    | JobRequest
    | CancelRequest
)


def ask(runtime_dir: Path, kind: DoorKind, body: Request, timeout_s: float = ASK_TIMEOUT_S) -> dict[str, object] | None:
    """The answer's body (an ErrorAnswer under `error`: {"error": message}); None when no
    inventory worker answers in time."""
    endpoints = Endpoints(runtime_dir)
    if not endpoints.socket_path(endpoints.inventory).exists():
        return None
    reply = request(endpoints.inventory, kind, dict(body), timeout_s=timeout_s)
    if reply is None or not isinstance(reply.body, dict):
        return None
    if reply.type != kind:
        return {"error": str(reply.body.get("message") or f"unexpected answer {reply.type!r}")[:300]}
    return reply.body
