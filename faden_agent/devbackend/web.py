"""The reference backend's HTTP plumbing: the request handler every API module's actions get
(reading bounded bodies, answering JSON, the admin and node guards), HttpError, and route(),
which turns a path template of faden_agent/protocol/ into a route-table entry.
"""

from __future__ import annotations

import hmac
import logging
import re
import time
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import orjson

from faden_agent import protocol
from faden_agent.devbackend.rotation import Contested
from faden_agent.http.serve.server import BoundedHandler

if TYPE_CHECKING:
    from faden_agent.devbackend.app import Backend

log = logging.getLogger("faden_agent.devbackend")

MAX_BODY_BYTES = protocol.MAX_REQUEST_BODY_BYTES  # also the most a gzip body may inflate to

Action = Callable[..., int]
Route = tuple[str, re.Pattern[str], Action]


class HttpError(Exception):
    def __init__(self, status: int, error: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.error, self.message, self.headers = status, error, message, headers or {}


def route(method: str, path: str, action: Action) -> Route:
    """A route-table entry: `{name}` in the path matches one id-like segment, passed as name=."""
    pattern = re.compile(re.sub(r"\{(\w+)\}", r"(?P<\1>[A-Za-z0-9._:-]+)", path))
    return (method, pattern, action)


class Request(BoundedHandler):
    server_version = "faden-dev-backend"
    # The head and the body of an answer are two writes: with Nagle on, the body waits for
    # the client's delayed ACK of the head (40 ms on Linux) on every keep-alive answer.
    disable_nagle_algorithm = True
    backend: Backend  # set on the subclass made by server.make_server
    routes: list[Route]  # likewise: server.ROUTES

    def do_GET(self) -> None:
        self.dispatch("GET")

    def do_POST(self) -> None:
        self.dispatch("POST")

    def do_DELETE(self) -> None:
        self.dispatch("DELETE")

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), fmt % args)  # paths only: secrets travel in headers/bodies

    def refuse_request(self, status: int, reason: str, message: str) -> None:
        self.send_json(status, {"error": reason, "message": message})

    def dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        self.arrived_at = time.time()
        self.logged = False
        self.query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        status = 500
        try:
            for route_method, pattern, action in self.routes:
                match = pattern.fullmatch(url.path)
                if match and route_method == method:
                    status = action(self, **match.groupdict()) or 200
                    break
            else:
                raise HttpError(404, "not_found", f"no route for {method} {url.path}")
        except HttpError as exc:
            status = exc.status
            self.send_json(exc.status, {"error": exc.error, "message": exc.message}, exc.headers)
        except (BrokenPipeError, ConnectionResetError):
            status = 499
            self.close_connection = True
        except Exception as exc:  # one bad request must not kill the server
            log.exception("internal error on %s %s", method, url.path)
            status = 500
            try:
                self.send_json(500, {"error": "internal", "message": str(exc)})
            except OSError:
                pass
        if url.path.startswith(protocol.AGENT_API) and not self.logged:
            self.log_agent_request(status)

    def log_agent_request(self, status: int) -> None:
        """Into the backend's request log (GET .../requests); a stream logs itself when it opens."""
        self.backend.log_request(self.arrived_at, self.command, urlsplit(self.path).path, status)
        self.logged = True

    # ------------------------------------------------------------------ answers

    def send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> int:
        data = orjson.dumps(body)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        return status

    def send_empty(self, status: int) -> int:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()
        return status

    def send_bytes(self, status: int, data: bytes, content_type: str | None = None) -> int:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        return status

    # ------------------------------------------------------------------ bodies

    def body_limit(self) -> int:
        switched = self.backend.faults.max_body_bytes
        return MAX_BODY_BYTES if switched is None else min(switched, MAX_BODY_BYTES)

    def read_raw_body(self) -> bytes:
        """The body as sent, at most body_limit() bytes; a bad or too large Content-Length is
        refused before anything is read (the connection then closes: its rest is unread)."""
        value = (self.headers.get("Content-Length") or "0").strip()
        limit = self.body_limit()
        if not value.isdigit() or len(value) > 19:  # "-5" would make rfile.read() read to EOF
            self.close_connection = True
            raise HttpError(400, "bad_length", f"Content-Length must be a whole number of bytes, got {value[:40]!r}")
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            raise HttpError(411, "length_required", "send a Content-Length, not a chunked body")
        length = int(value)
        if length > limit:
            self.close_connection = True
            raise HttpError(413, "too_large", f"body of {length} bytes exceeds {limit}")
        return self.rfile.read(length) if length else b""

    def read_body(self) -> bytes:
        data = self.read_raw_body()
        if self.headers.get("Content-Encoding", "").lower() == "gzip":
            data = gunzip_bounded(data, self.body_limit())
        return data

    def read_json(self) -> dict[str, Any]:
        try:
            body = orjson.loads(self.read_body() or b"{}")
        except orjson.JSONDecodeError as exc:
            raise HttpError(400, "bad_body", f"body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise HttpError(400, "bad_body", "body must be a JSON object")
        return body

    # ------------------------------------------------------------------ guards

    def bearer(self) -> str | None:
        value = self.headers.get("Authorization", "")
        return value[7:].strip() if value.startswith("Bearer ") else None

    def require_admin(self) -> None:
        given = self.bearer() or ""
        if not hmac.compare_digest(given.encode(), self.backend.admin_token.encode()):
            raise HttpError(401, "unauthorized", "admin token missing or wrong")

    def require_node(self, stream: bool = False) -> str:
        """The node id of the request's credential; 401 unknown or contested, 403 revoked."""
        self.backend.faults.refuse_in_maintenance()
        credential = self.bearer()
        if not credential:
            raise HttpError(401, "unauthorized", "no credential")
        try:
            found = self.backend.store.node_for_credential(credential, stream)
        except Contested as exc:
            raise HttpError(401, "shared_identity", str(exc)) from None
        if found is None:
            raise HttpError(401, "unauthorized", "unknown credential")
        node_id, revoked = found
        if revoked:
            raise HttpError(403, "revoked", "this node was removed; its credential is revoked")
        return node_id

    def node_or_404(self, node_id: str) -> dict[str, Any]:
        node = self.backend.store.node(node_id)
        if node is None:
            raise HttpError(404, "not_found", f"no node {node_id}")
        return node


def gunzip_bounded(data: bytes, limit: int) -> bytes:
    """The gzip body (all members) inflated to at most `limit` bytes: a bomb is refused with
    413 after `limit` bytes of output, never inflated whole."""
    out = bytearray()
    while data:
        inflater = zlib.decompressobj(wbits=31)
        try:
            out += inflater.decompress(data, limit + 1 - len(out))
        except zlib.error as exc:
            raise HttpError(400, "bad_body", f"body is not valid gzip: {exc}") from None
        if len(out) > limit or inflater.unconsumed_tail:
            raise HttpError(413, "too_large", f"body inflates to more than {limit} bytes")
        if not inflater.eof:
            raise HttpError(400, "bad_body", "body is not valid gzip: it ends early")
        data = inflater.unused_data  # the next member, if any
    return bytes(out)
