"""Image relays through the reference backend (relay.py explains them): the admin starts one,
the holder and the receiver then meet here, both connecting outbound."""

from __future__ import annotations

import queue
import ssl
from typing import Any

import orjson

from faden_agent import protocol
from faden_agent.devbackend.fanout import image_size
from faden_agent.devbackend.relay import WAIT_S, Relay
from faden_agent.devbackend.web import HttpError, Request, Route, route

DEFAULT_TTL_S = 1800.0


def start(req: Request) -> int:
    """Relay an image from holder to receiver through this backend (peers that cannot
    reach each other): both get their command, both connect outbound."""
    req.require_admin()
    body = req.read_json()
    image_id, holder, receiver = body.get("image_id"), body.get("holder"), body.get("receiver")
    if not (isinstance(image_id, str) and isinstance(holder, str) and isinstance(receiver, str)) or not all(
        (image_id, holder, receiver)
    ):
        raise HttpError(400, "bad_body", "body needs 'image_id', 'holder' and 'receiver' (node ids)")
    req.node_or_404(holder)
    req.node_or_404(receiver)
    relay = Relay(image_id, float(body.get("ttl_s") or DEFAULT_TTL_S))
    req.backend.relays[relay.id] = relay
    scheme = "https" if isinstance(req.connection, ssl.SSLSocket) else "http"
    url = f"{scheme}://{req.headers.get('Host')}{protocol.RELAY_PATH.format(relay_id=relay.id)}"
    store = req.backend.store
    serving = store.add_command(
        holder, "image.relay", {"url": url, "token": relay.token, "image_id": image_id}, None, None
    )
    spec: dict[str, Any] = {"image_id": image_id, "peers": [{"address": url, "ticket": relay.ticket}]}
    if isinstance(body.get("image"), str):
        spec["image"] = body["image"]
    size = image_size(store, str(holder), str(image_id))
    if size:
        spec["size_bytes"] = size
    fetching = store.add_command(receiver, "image.fetch", spec, None, None)
    relay.forget_secrets()
    req.backend.notify_streams()
    return req.send_json(200, {"id": relay.id, "relay_command": serving["id"], "fetch_command": fetching["id"]})


def _relay(req: Request, relay_id: str) -> Relay:
    relay = req.backend.relays.get(relay_id)
    if relay is None:
        raise HttpError(404, "not_found", f"no relay {relay_id[:40]}")
    return relay


def receiver_fetch(req: Request, relay_id: str) -> int:
    """The receiver, as at a holder's peer port: the holder's stream, passed on."""
    relay = _relay(req, relay_id)
    if not relay.take_ticket(req.bearer() or ""):
        raise HttpError(401, "ticket_refused", "unknown, used or expired relay ticket")
    relay.request = req.read_body()
    relay.request_ready.set()
    if not relay.stream_started.wait(WAIT_S):
        raise HttpError(504, "peer_failed", "the holder did not connect to the relay")
    req.send_response(200)
    for name, value in {**(relay.headers or {}), "Transfer-Encoding": "chunked", "Connection": "close"}.items():
        req.send_header(name, value)
    req.end_headers()
    req.close_connection = True
    while True:
        chunk = relay.chunks.get(timeout=WAIT_S)
        if chunk is None:
            req.wfile.write(b"0\r\n\r\n")
            return 200
        if isinstance(chunk, Exception):  # the holder's stream broke: cut ours, unfinished
            return 502
        req.wfile.write(b"%x\r\n" % len(chunk) + chunk + b"\r\n")


def holder_request(req: Request, relay_id: str) -> int:
    """The holder: the receiver's request once it came (204 until then: ask again)."""
    relay = _relay(req, relay_id)
    if not relay.holder_token_ok(req.bearer() or ""):
        raise HttpError(401, "unauthorized", "wrong or expired relay token")
    if not relay.request_ready.wait(min(WAIT_S, 20.0)):
        return req.send_empty(204)
    return req.send_json(200, orjson.loads(relay.request or b"{}"))


def holder_stream(req: Request, relay_id: str) -> int:
    """The holder's archive (chunked), into the bounded queue the receiver drains."""
    relay = _relay(req, relay_id)
    if not relay.holder_token_ok(req.bearer() or "") or relay.stream_started.is_set():
        raise HttpError(401, "unauthorized", "wrong or expired relay token, or a second stream")
    relay.headers = {k: v for k, v in req.headers.items() if k.lower().startswith("x-faden-")}
    relay.stream_started.set()
    req.close_connection = True
    try:
        while True:
            size = int(req.rfile.readline(100).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                req.rfile.readline(100)
                break
            chunk = req.rfile.read(size)
            req.rfile.readline(100)
            if len(chunk) != size:
                raise ConnectionError("the holder's stream ended inside a chunk")
            relay.bytes += size
            relay.chunks.put(chunk, timeout=WAIT_S)
    except (OSError, ValueError, queue.Full) as exc:
        relay.chunks.put(ConnectionError(str(exc)))
        raise HttpError(502, "peer_failed", f"relay stream broke: {type(exc).__name__}") from None
    relay.chunks.put(None, timeout=WAIT_S)
    return req.send_json(200, {"bytes": relay.bytes})


ROUTES: list[Route] = [
    route("POST", protocol.ADMIN_RELAYS_PATH, start),
    route("POST", protocol.RELAY_FETCH_PATH, receiver_fetch),
    route("GET", protocol.RELAY_REQUEST_PATH, holder_request),
    route("POST", protocol.RELAY_STREAM_PATH, holder_stream),
]
