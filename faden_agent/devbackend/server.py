"""The reference backend's HTTP server: the route tables of its API modules joined, and
make_server. Standard library only (plus orjson), so it runs anywhere Python does; the agent
itself never imports this package.
"""

from __future__ import annotations

import re
import ssl
from pathlib import Path

from faden_agent import protocol
from faden_agent.devbackend import api_admin, api_agent, api_relay, downloads, faults
from faden_agent.devbackend.app import Backend
from faden_agent.devbackend.web import MAX_BODY_BYTES, Request, Route
from faden_agent.http.serve.server import BoundedServer, RouteLimits, ServerLimits

ROUTES: list[Route] = [*api_agent.ROUTES, *api_relay.ROUTES, *downloads.ROUTES, *api_admin.ROUTES, *faults.ROUTES]

# Every agent's stream holds a worker for as long as it is open: room for a test cluster's.
LIMITS = ServerLimits(workers=256, backlog=256, max_waiting=4096, first_line_s=10.0, idle_s=60.0, keepalive_s=60.0)
BODY = RouteLimits(head_s=10.0, body_bytes=MAX_BODY_BYTES, body_s=60.0)
# Enrollment is unauthenticated: 576 heads that never finished their bodies held every
# worker for the 60 s of BODY (every request 503); its facts fit in a few KiB, sent at once.
ENROLL = RouteLimits(head_s=10.0, body_bytes=256 << 10, body_s=3.0)
RELAY_UPLOAD = RouteLimits(head_s=10.0, body_bytes=None, body_s=3600.0, chunked=True)  # an image, chunked
_RELAY_STREAM = re.compile(re.sub(r"\{\w+\}", r"[^/]+", protocol.RELAY_STREAM_PATH))


def route_limits(method: str, path: str) -> RouteLimits:
    path = path.split("?", 1)[0]
    if path == protocol.ENROLL_PATH:
        return ENROLL
    return RELAY_UPLOAD if _RELAY_STREAM.fullmatch(path) else BODY


def make_server(
    backend: Backend, host: str, port: int, *, tls_cert: Path | None = None, tls_key: Path | None = None
) -> BoundedServer:
    handler = type("BoundRequest", (Request,), {"backend": backend, "routes": ROUTES})
    context = None
    if tls_cert is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(tls_cert), str(tls_key) if tls_key else None)
    return BoundedServer((host, port), handler, limits=LIMITS, routes=route_limits, tls=context)
