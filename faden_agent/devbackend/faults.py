"""Fault switches of the reference backend, for fault tests: maintenance (503 + Retry-After),
dropped and stalled streams, a smaller body limit. Set with POST .../faults; the agent
protocol's actions read them (api_agent.py, web.Request)."""

from __future__ import annotations

from typing import Any

from faden_agent import protocol
from faden_agent.devbackend.web import HttpError, Request, Route, route


class Faults:
    def __init__(self) -> None:
        self.maintenance_retry_after: int | None = None
        self.stall_streams = False
        self.drop_generation = 0
        self.max_body_bytes: int | None = None  # a smaller body limit: 413s on demand

    def as_dict(self) -> dict[str, Any]:
        return {
            "maintenance_retry_after": self.maintenance_retry_after,
            "stall_streams": self.stall_streams,
            "drop_generation": self.drop_generation,
            "max_body_bytes": self.max_body_bytes,
        }

    def refuse_in_maintenance(self) -> None:
        if self.maintenance_retry_after is not None:
            retry_after = str(self.maintenance_retry_after)
            raise HttpError(503, "maintenance", "backend under maintenance", {"Retry-After": retry_after})


def show_or_switch(req: Request) -> int:
    req.require_admin()
    faults = req.backend.faults
    if req.command == "POST":
        body = req.read_json()
        if "maintenance_retry_after" in body:
            value = body["maintenance_retry_after"]
            if value is not None and (not isinstance(value, int) or value < 0):
                raise HttpError(400, "bad_body", "maintenance_retry_after must be whole seconds or null")
            faults.maintenance_retry_after = value
        if "max_body_bytes" in body:
            value = body["max_body_bytes"]
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise HttpError(400, "bad_body", "max_body_bytes must be whole bytes or null")
            faults.max_body_bytes = value
        if "stall_streams" in body:
            faults.stall_streams = bool(body["stall_streams"])
        if body.get("drop_streams"):
            faults.drop_generation += 1
        req.backend.notify_streams()
    return req.send_json(200, faults.as_dict())


ROUTES: list[Route] = [
    route("GET", protocol.ADMIN_FAULTS_PATH, show_or_switch),
    route("POST", protocol.ADMIN_FAULTS_PATH, show_or_switch),
]
