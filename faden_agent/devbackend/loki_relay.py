"""The agent's log push, passed on to the Loki the reference backend was started with
(--loki-url): body and encoding as sent, Loki's answer as it came."""

from __future__ import annotations

import urllib.error
import urllib.request

from faden_agent import protocol
from faden_agent.devbackend.web import HttpError, Request

LOKI_TIMEOUT_S = 30


def forward_to_loki(req: Request, loki_url: str, tenant: str | None = None) -> int:
    data = req.read_raw_body()
    headers = {"Content-Type": req.headers.get("Content-Type", "application/json")}
    if tenant:
        headers["X-Scope-OrgID"] = tenant
    if req.headers.get("Content-Encoding"):
        headers["Content-Encoding"] = req.headers["Content-Encoding"]
    request = urllib.request.Request(f"{loki_url}{protocol.LOKI_PUSH_PATH}", data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=LOKI_TIMEOUT_S) as reply:
            status, payload = reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        status, payload = exc.code, exc.read()
    except OSError as exc:
        raise HttpError(502, "loki_unreachable", f"Loki did not answer: {exc}") from None
    return req.send_bytes(status, payload)
