"""The inventory worker's door: the typed requests other processes (the executor, the CLI) ask of
it on its REP socket (Endpoints.inventory), since it alone holds NVML and the GPU evidence. A
request is the message type (a DoorKind) and its body; the answer comes back under the same
type, or `error` with a message. `ask` is the client; None when no inventory worker answers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, TypedDict

from faden_agent.ipc.endpoints import Endpoints
from faden_agent.ipc.sockets import request
from faden_agent.protocol.capture import CaptureQuestion, CaptureRefused, CaptureSummary

DoorKind = Literal["gpu.forget", "gpu.evidence", "capture"]
GPU_FORGET: DoorKind = "gpu.forget"  # acknowledge a GPU removed for good
GPU_EVIDENCE: DoorKind = "gpu.evidence"  # the GPU evidence as it is in memory now (death causes)
CAPTURE: DoorKind = "capture"  # a serving container died of a hardware cause: capture its evidence
KINDS: tuple[str, ...] = (GPU_FORGET, GPU_EVIDENCE, CAPTURE)
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


class ErrorAnswer(TypedDict):
    message: str


def ask(
    runtime_dir: Path,
    kind: DoorKind,
    body: ForgetRequest | EvidenceRequest | CaptureQuestion,
    timeout_s: float = ASK_TIMEOUT_S,
) -> dict[str, object] | None:
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
