"""What asks for a capture: a `workload.stalled` event (sent once its capture is down, with
the summary under `capture`) and the executor's question about a serving container that died
of a hardware cause (answered at once with the id and the GPUs' verdicts; the capture
follows). A death older than FRESH_S (a replay) is not captured: its GPUs' state is gone."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from faden_agent.node import captures
from faden_agent.protocol.capture import CaptureRefused, CaptureSummary
from faden_agent.workers.inventory.capture.capturer import Capturer, Job

FRESH_S = 60.0
ALREADY = "captured already"
MAX_TEXT = 256


def refused(capture_id: str, why: str) -> CaptureRefused:
    """The `capture` of an event whose capture was not taken (now)."""
    return {"id": capture_id if why == ALREADY else None, "reason": why}


def _text(value: Any) -> str | None:
    return value[:MAX_TEXT] if isinstance(value, str) else None


class Triggers:
    def __init__(self, capturer: Capturer):
        self.capturer = capturer

    def stalled(self, data: dict[str, Any], record_id: str, send: Callable[[dict[str, Any], str], Any]) -> None:
        """Capture, then send the event with its `capture` (at once when none is taken)."""
        capture_id = captures.capture_id(record_id)
        container = {k: data.get(k) for k in ("name", "cluster", "workload")}
        job = Job(
            capture_id,
            data["type"],
            {"id": data["container_id"], **container},
            float(data.get("time") or time.time()),
            lambda summary: send({**data, "capture": summary}, record_id),
        )
        why = self.capturer.submit(job)
        if why is not None:
            send({**data, "capture": refused(capture_id, why)}, record_id)

    def died(self, body: Any) -> CaptureSummary | CaptureRefused:
        """The executor's question (CaptureQuestion, checked here: it comes over IPC): the
        event's `capture`, or why none is taken."""
        body = body if isinstance(body, dict) else {}
        record_id, container_id = _text(body.get("record_id")), _text(body.get("container_id"))
        at = body.get("time")
        if not record_id or not container_id or not isinstance(at, int | float) or isinstance(at, bool):
            return refused("", "a capture question needs record_id, container_id and time")
        capture_id = captures.capture_id(record_id)
        if time.time() - at > FRESH_S:
            return refused(capture_id, f"the death is over {FRESH_S:g} s old: its GPUs' state then is gone")
        gpus = [
            {"index": g.get("index"), "uuid": _text(g.get("uuid"))}
            for g in (body.get("gpus") if isinstance(body.get("gpus"), list) else [])[:64]
            if isinstance(g, dict)
        ]
        container = {"id": container_id, **{k: _text(body.get(k)) for k in ("name", "cluster", "workload")}}
        job = Job(capture_id, "container.die", container, float(at), lambda summary: None, gpus)
        why = self.capturer.submit(job)
        if why is not None and why != ALREADY:
            return refused(capture_id, why)
        return self.capturer.brief_now(capture_id, container_id, gpus)
