"""The reference backend's HTTP server: the agent protocol (docs/protocol.md), the admin
API, fault switches and a downloads directory. Standard library only (plus orjson), so it
runs anywhere Python does; the agent itself never imports this package.
"""

from __future__ import annotations

import collections
import hmac
import logging
import queue
import re
import ssl
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

from faden_agent import protocol
from faden_agent.devbackend.builds import with_available_version
from faden_agent.devbackend.store import Store, TokenRefused

log = logging.getLogger("faden_agent.devbackend")

AGENT_PREFIX = "/api/agent/v1"
ADMIN_PREFIX = "/api/admin/system"
MAX_BODY_BYTES = protocol.MAX_REQUEST_BODY_BYTES  # also the most a gzip body may inflate to
DEFAULT_KEEPALIVE_SEC = 15.0
KEEPALIVE_RANGE = (0.2, 300.0)
STREAM_POLL_S = 0.2
REQUEST_LOG_SIZE = 5000


class HttpError(Exception):
    def __init__(self, status: int, error: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.error, self.message, self.headers = status, error, message, headers or {}


class Faults:
    """Switches for fault tests: maintenance (503 + Retry-After), dropped and stalled streams."""

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


class Backend:
    """Everything a request handler needs: the store, the switches, the settings."""

    def __init__(
        self,
        data_dir: Path,
        admin_token: str,
        *,
        downloads: Path | None = None,
        loki_url: str | None = None,
        keepalive_sec: float = DEFAULT_KEEPALIVE_SEC,
    ):
        if not admin_token or not admin_token.strip():
            raise ValueError("the admin token is empty: it would open the admin API to anyone")
        self.store = Store(data_dir)
        self.admin_token = admin_token
        self.downloads = downloads
        self.loki_url = loki_url.rstrip("/") if loki_url else None
        self.keepalive_sec = keepalive_sec
        self.faults = Faults()
        self.new_commands = threading.Condition()
        self.cluster_generation = 0  # bumped on every cluster change: streams send `peers` again
        self.fanouts: dict[str, Any] = {}  # fan-out id -> devbackend.fanout.Fanout (issue 14)
        self.relays: dict[str, Any] = {}  # relay id -> devbackend.relay.Relay (issue 14)
        self.requests: collections.deque[dict[str, Any]] = collections.deque(maxlen=REQUEST_LOG_SIZE)
        self.requests_lock = threading.Lock()

    def log_request(self, at: float, method: str, path: str, status: int) -> None:
        with self.requests_lock:
            self.requests.append({"at": at, "method": method, "path": path, "status": status})

    def notify_streams(self) -> None:
        with self.new_commands:
            self.new_commands.notify_all()


Route = tuple[str, re.Pattern[str], Callable[..., Any]]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "faden-dev-backend"
    # The head and the body of an answer are two writes: with Nagle on, the body waits for
    # the client's delayed ACK of the head (40 ms on Linux) on every keep-alive answer.
    disable_nagle_algorithm = True
    backend: Backend  # set on the subclass made by make_server

    # ------------------------------------------------------------------ plumbing

    def do_GET(self) -> None:
        self.dispatch("GET")

    def do_POST(self) -> None:
        self.dispatch("POST")

    def do_DELETE(self) -> None:
        self.dispatch("DELETE")

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), fmt % args)  # paths only: secrets travel in headers/bodies

    def dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        self.arrived_at = time.time()
        self.logged = False
        self.query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        status = 500
        try:
            for route_method, pattern, action in ROUTES:
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
        except Exception as exc:  # noqa: BLE001 - one bad request must not kill the server
            log.exception("internal error on %s %s", method, url.path)
            status = 500
            try:
                self.send_json(500, {"error": "internal", "message": str(exc)})
            except OSError:
                pass
        if url.path.startswith(AGENT_PREFIX) and not self.logged:
            self.backend.log_request(self.arrived_at, method, url.path, status)

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

    def bearer(self) -> str | None:
        value = self.headers.get("Authorization", "")
        return value[7:].strip() if value.startswith("Bearer ") else None

    # ------------------------------------------------------------------ guards

    def require_admin(self) -> None:
        given = self.bearer() or ""
        if not hmac.compare_digest(given.encode(), self.backend.admin_token.encode()):
            raise HttpError(401, "unauthorized", "admin token missing or wrong")

    def check_maintenance(self) -> None:
        retry_after = self.backend.faults.maintenance_retry_after
        if retry_after is not None:
            raise HttpError(503, "maintenance", "backend under maintenance", {"Retry-After": str(retry_after)})

    def require_node(self) -> str:
        """The node id of the request's credential; 401 unknown, 403 revoked."""
        self.check_maintenance()
        credential = self.bearer()
        if not credential:
            raise HttpError(401, "unauthorized", "no credential")
        found = self.backend.store.node_for_credential(credential)
        if found is None:
            raise HttpError(401, "unauthorized", "unknown credential")
        node_id, revoked = found
        if revoked:
            raise HttpError(403, "revoked", "this node was removed; its credential is revoked")
        return node_id

    # ------------------------------------------------------------------ agent protocol

    def agent_enroll(self) -> int:
        self.check_maintenance()
        body = self.read_json()
        token = body.pop("token", None)
        if not isinstance(token, str) or not token:
            raise HttpError(400, "bad_body", "enrollment needs a token")
        if not isinstance(body.get("agent_id"), str) or not body["agent_id"]:
            raise HttpError(400, "bad_body", "enrollment needs an agent_id")
        attempt = body.pop("enrollment_id", None)
        try:
            node_id, credential = self.backend.store.enroll(token, body, attempt if isinstance(attempt, str) else None)
        except TokenRefused as exc:
            raise HttpError(403, "token_refused", str(exc)) from None
        log.info("enrolled agent %s as %s", body["agent_id"], node_id)
        return self.send_json(
            200, {"node_id": node_id, "credential": credential, "protocol": protocol.PROTOCOL_VERSION}
        )

    def agent_stream(self) -> int:
        node_id = self.require_node()
        try:
            after = int(self.query.get("after", "0"))
            keepalive = float(self.query.get("keepalive", self.backend.keepalive_sec))
        except ValueError:
            raise HttpError(400, "bad_query", "after must be an integer and keepalive a number") from None
        keepalive = min(max(keepalive, KEEPALIVE_RANGE[0]), KEEPALIVE_RANGE[1])
        faults = self.backend.faults
        generation = faults.drop_generation
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        self.backend.log_request(self.arrived_at, "GET", urlsplit(self.path).path, 200)  # now, not at its end
        self.logged = True
        if faults.stall_streams:
            return self.stall(generation)
        self.write_line(
            {
                "type": "hello",
                "node_id": node_id,
                "keepalive_sec": keepalive,
                "after": after,
                "epoch": self.backend.store.epoch,
            }
        )
        last_write = time.monotonic()
        peers_sent_at = None  # the cluster generation the last `peers` message reflects
        while True:
            if peers_sent_at != self.backend.cluster_generation:
                peers_sent_at = self.backend.cluster_generation
                self.write_line(self.backend.store.peers_message(node_id))
            if faults.drop_generation != generation or faults.maintenance_retry_after is not None:
                self.connection.shutdown(2)  # abrupt: like a crashed server or a cut link
                return 200
            if faults.stall_streams:
                return self.stall(generation)
            for command in self.backend.store.commands_after(node_id, after):
                self.write_line(command)
                after = command["seq"]
                last_write = time.monotonic()
            if time.monotonic() - last_write >= keepalive:
                self.write_line({"type": "keepalive", "ts": time.time()})
                last_write = time.monotonic()
            with self.backend.new_commands:
                self.backend.new_commands.wait(min(STREAM_POLL_S, keepalive))

    def stall(self, generation: int) -> int:
        """Headers sent, then silence (a hung proxy or server), until the streams are dropped
        or the stall is switched off (then cut, so no thread waits forever on a gone client)."""
        faults = self.backend.faults
        while faults.drop_generation == generation and faults.stall_streams:
            time.sleep(STREAM_POLL_S)
        self.connection.shutdown(2)
        return 200

    def write_line(self, obj: Any) -> None:
        data = orjson.dumps(obj) + b"\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def agent_uplink(self) -> int:
        node_id = self.require_node()
        body = self.read_json()
        records = body.get("records")
        if not isinstance(records, list):
            raise HttpError(400, "bad_body", "body needs a list 'records'")
        valid = [r for r in records if _valid_record(r)]
        acked = self.backend.store.store_records(node_id, valid)
        # Malformed records are named back (when they have an id) so the agent can drop them.
        rejected = [
            r["id"] for r in records if not _valid_record(r) and isinstance(r, dict) and isinstance(r.get("id"), str)
        ]
        return self.send_json(200, {"acked": acked, "rejected": rejected})

    def agent_logs_target(self) -> int:
        self.require_node()
        if self.backend.loki_url:
            return self.send_json(200, {"mode": "loki", "url": self.backend.loki_url})
        return self.send_json(200, {"mode": "push", "path": f"{AGENT_PREFIX}/logs/push"})

    def agent_logs_push(self) -> int:
        node_id = self.require_node()
        if self.backend.loki_url:
            return self.forward_to_loki()
        try:
            push = orjson.loads(self.read_body())
        except orjson.JSONDecodeError as exc:
            raise HttpError(400, "bad_body", f"push body is not JSON: {exc}") from None
        if not isinstance(push, dict) or not isinstance(push.get("streams"), list):
            raise HttpError(400, "bad_body", "push body needs a list 'streams'")
        try:
            self.backend.store.store_log_push(node_id, push)
        except (TypeError, IndexError, AttributeError) as exc:
            raise HttpError(400, "bad_body", f"malformed stream entry: {exc}") from None
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()
        return 204

    def forward_to_loki(self) -> int:
        data = self.read_raw_body()
        headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
        if self.headers.get("Content-Encoding"):
            headers["Content-Encoding"] = self.headers["Content-Encoding"]
        request = urllib.request.Request(f"{self.backend.loki_url}/loki/api/v1/push", data=data, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                status, payload = reply.status, reply.read()
        except urllib.error.HTTPError as exc:
            status, payload = exc.code, exc.read()
        except OSError as exc:
            raise HttpError(502, "loki_unreachable", f"Loki did not answer: {exc}") from None
        self.send_response(status)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        return status

    # ------------------------------------------------------------------ downloads

    def downloads(self, name: str) -> int:
        root = self.backend.downloads
        if root is None:
            raise HttpError(404, "not_found", "no downloads directory configured")
        path = (root / name).resolve()
        if path.parent != root.resolve() or not path.is_file():
            raise HttpError(404, "not_found", f"no such download: {name}")
        data = path.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        return 200

    # ------------------------------------------------------------------ admin

    def admin_mint_token(self) -> int:
        self.require_admin()
        return self.send_json(200, {"token": self.backend.store.mint_token()})

    def admin_nodes(self) -> int:
        self.require_admin()
        downloads = self.backend.downloads
        return self.send_json(
            200, {"nodes": [with_available_version(n, downloads) for n in self.backend.store.nodes()]}
        )

    def admin_node(self, node_id: str) -> int:
        self.require_admin()
        return self.send_json(200, with_available_version(self.node_or_404(node_id), self.backend.downloads))

    def admin_revoke(self, node_id: str) -> int:
        self.require_admin()
        if not self.backend.store.revoke(node_id):
            raise HttpError(404, "not_found", f"no node {node_id}")
        self.backend.faults.drop_generation += 1  # its open stream ends now
        return self.send_json(200, {"node_id": node_id, "revoked": True})

    def admin_send_command(self, node_id: str) -> int:
        self.require_admin()
        self.node_or_404(node_id)
        body = self.read_json()
        kind, spec = body.get("kind"), body.get("spec", {})
        if not isinstance(kind, str) or not kind:
            raise HttpError(400, "bad_body", "a command needs a string 'kind'")
        command_id = body.get("id")
        if command_id is not None and (not isinstance(command_id, str) or not command_id):
            raise HttpError(400, "bad_body", "'id' must be a non-empty string")
        deadline = body.get("deadline")
        if deadline is not None and not isinstance(deadline, (int, float)):
            raise HttpError(400, "bad_body", "'deadline' must be epoch seconds")
        created = self.backend.store.add_command(node_id, kind, spec, command_id, deadline)
        if created["node_id"] != node_id:
            raise HttpError(409, "conflict", f"command id {command_id} belongs to another node")
        self.backend.notify_streams()
        return self.send_json(200, {"id": created["id"], "seq": created["seq"]})

    def admin_command(self, command_id: str) -> int:
        self.require_admin()
        command = self.backend.store.command(command_id)
        if command is None:
            raise HttpError(404, "not_found", f"no command {command_id}")
        return self.send_json(200, command)

    def admin_records(self, node_id: str, kind: str) -> int:
        self.require_admin()
        if kind not in RECORD_VIEWS:
            raise HttpError(404, "not_found", f"no view {kind!r}; one of {', '.join(RECORD_VIEWS)}")
        self.node_or_404(node_id)
        store = self.backend.store
        if kind == "inventory":
            return self.send_json(200, store.inventory(node_id))
        if kind == "logs":
            return self.send_json(200, {"lines": store.log_lines(node_id)})
        record_kind = {"events": protocol.EVENT, "heartbeats": protocol.HEARTBEAT, "timeline": protocol.TIMELINE}[kind]
        try:
            limit = int(self.query.get("limit", "10000"))
        except ValueError:
            raise HttpError(400, "bad_query", "limit must be an integer") from None
        return self.send_json(200, {kind: store.records(node_id, record_kind, limit)})

    def admin_set_cluster(self, cluster: str) -> int:
        self.require_admin()
        nodes = self.read_json().get("nodes")
        if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
            raise HttpError(400, "bad_body", "body needs a list of node ids 'nodes'")
        try:
            members = self.backend.store.set_cluster(cluster, nodes)
        except KeyError as exc:
            raise HttpError(404, "not_found", str(exc.args[0])) from None
        self.backend.cluster_generation += 1
        self.backend.notify_streams()
        return self.send_json(200, {"cluster": cluster, "nodes": members})

    def admin_traffic(self, cluster: str) -> int:
        self.require_admin()
        return self.send_json(200, self.backend.store.traffic_matrix(cluster))

    def admin_fanout(self, cluster: str) -> int:
        """Put an image on every machine of the cluster, finished machines serving the next."""
        from faden_agent.devbackend.fanout import Fanout

        self.require_admin()
        body = self.read_json()
        image_id, image = body.get("image_id"), body.get("image")
        if (
            not isinstance(image_id, str)
            or not image_id.startswith("sha256:")
            or not isinstance(image, (str, type(None)))
        ):
            raise HttpError(400, "bad_body", "body needs 'image_id' (sha256:...) and optionally 'image' (a reference)")
        if not self.backend.store.members(cluster):
            raise HttpError(404, "not_found", f"no cluster {cluster[:100]}")
        fanout = Fanout(self.backend, cluster, image_id, image).start()
        self.backend.fanouts[fanout.id] = fanout
        return self.send_json(200, {"id": fanout.id})

    def admin_fanout_status(self, cluster: str, fanout_id: str) -> int:
        self.require_admin()
        fanout = self.backend.fanouts.get(fanout_id)
        if fanout is None or fanout.cluster != cluster:
            raise HttpError(404, "not_found", f"no fan-out {fanout_id[:40]} in cluster {cluster[:100]}")
        return self.send_json(200, fanout.status())

    # ------------------------------------------------------------------ relay (relay.py)

    def admin_relay(self) -> int:
        """Relay an image from holder to receiver through this backend (peers that cannot
        reach each other): both get their command, both connect outbound."""
        from faden_agent.devbackend.relay import Relay

        self.require_admin()
        body = self.read_json()
        image_id, holder, receiver = body.get("image_id"), body.get("holder"), body.get("receiver")
        if not all(isinstance(v, str) and v for v in (image_id, holder, receiver)):
            raise HttpError(400, "bad_body", "body needs 'image_id', 'holder' and 'receiver' (node ids)")
        self.node_or_404(holder)
        self.node_or_404(receiver)
        relay = Relay(image_id, float(body.get("ttl_s") or 1800))
        self.backend.relays[relay.id] = relay
        scheme = "https" if isinstance(self.connection, ssl.SSLSocket) else "http"
        url = f"{scheme}://{self.headers.get('Host')}{AGENT_PREFIX}/relays/{relay.id}"
        store = self.backend.store
        serving = store.add_command(
            holder, "image.relay", {"url": url, "token": relay.token, "image_id": image_id}, None, None
        )
        spec = {"image_id": image_id, "peers": [{"address": url, "ticket": relay.ticket}]}
        if isinstance(body.get("image"), str):
            spec["image"] = body["image"]
        fetching = store.add_command(receiver, "image.fetch", spec, None, None)
        relay.forget_secrets()
        self.backend.notify_streams()
        return self.send_json(200, {"id": relay.id, "relay_command": serving["id"], "fetch_command": fetching["id"]})

    def _relay(self, relay_id: str) -> Any:
        relay = self.backend.relays.get(relay_id)
        if relay is None:
            raise HttpError(404, "not_found", f"no relay {relay_id[:40]}")
        return relay

    def relay_fetch(self, relay_id: str) -> int:
        """The receiver, as at a holder's peer port: the holder's stream, passed on."""
        from faden_agent.devbackend.relay import WAIT_S

        relay = self._relay(relay_id)
        if not relay.take_ticket(self.bearer() or ""):
            raise HttpError(401, "ticket_refused", "unknown, used or expired relay ticket")
        relay.request = self.read_body()
        relay.request_ready.set()
        if not relay.stream_started.wait(WAIT_S):
            raise HttpError(504, "peer_failed", "the holder did not connect to the relay")
        self.send_response(200)
        for name, value in {**(relay.headers or {}), "Transfer-Encoding": "chunked", "Connection": "close"}.items():
            self.send_header(name, value)
        self.end_headers()
        self.close_connection = True
        while True:
            chunk = relay.chunks.get(timeout=WAIT_S)
            if chunk is None:
                self.wfile.write(b"0\r\n\r\n")
                return 200
            if isinstance(chunk, Exception):  # the holder's stream broke: cut ours, unfinished
                return 502
            self.wfile.write(b"%x\r\n" % len(chunk) + chunk + b"\r\n")

    def relay_request(self, relay_id: str) -> int:
        """The holder: the receiver's request once it came (204 until then: ask again)."""
        from faden_agent.devbackend.relay import WAIT_S

        relay = self._relay(relay_id)
        if not relay.holder_token_ok(self.bearer() or ""):
            raise HttpError(401, "unauthorized", "wrong or expired relay token")
        if not relay.request_ready.wait(min(WAIT_S, 20.0)):
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return 204
        return self.send_json(200, orjson.loads(relay.request or b"{}"))

    def relay_stream(self, relay_id: str) -> int:
        """The holder's archive (chunked), into the bounded queue the receiver drains."""
        from faden_agent.devbackend.relay import WAIT_S

        relay = self._relay(relay_id)
        if not relay.holder_token_ok(self.bearer() or "") or relay.stream_started.is_set():
            raise HttpError(401, "unauthorized", "wrong or expired relay token, or a second stream")
        relay.headers = {k: v for k, v in self.headers.items() if k.lower().startswith("x-faden-")}
        relay.stream_started.set()
        self.close_connection = True
        try:
            while True:
                size = int(self.rfile.readline(100).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline(100)
                    break
                chunk = self.rfile.read(size)
                self.rfile.readline(100)
                if len(chunk) != size:
                    raise ConnectionError("the holder's stream ended inside a chunk")
                relay.bytes += size
                relay.chunks.put(chunk, timeout=WAIT_S)
        except (OSError, ValueError, queue.Full) as exc:
            relay.chunks.put(ConnectionError(str(exc)))
            raise HttpError(502, "peer_failed", f"relay stream broke: {type(exc).__name__}") from None
        relay.chunks.put(None, timeout=WAIT_S)
        return self.send_json(200, {"bytes": relay.bytes})

    def admin_faults(self) -> int:
        self.require_admin()
        faults = self.backend.faults
        if self.command == "POST":
            body = self.read_json()
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
            self.backend.notify_streams()
        return self.send_json(200, faults.as_dict())

    def admin_requests(self) -> int:
        self.require_admin()
        since = float(self.query.get("since", "0"))
        with self.backend.requests_lock:
            rows = [r for r in self.backend.requests if r["at"] >= since]
        return self.send_json(200, {"requests": rows})

    def admin_stats(self) -> int:
        self.require_admin()
        return self.send_json(200, {"records": self.backend.store.count_records()})

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


def _valid_record(record: Any) -> bool:
    return (
        isinstance(record, dict)
        and isinstance(record.get("id"), str)
        and bool(record["id"])
        and isinstance(record.get("kind"), str)
        and isinstance(record.get("data"), dict)
    )


def _route(method: str, path: str, action: Callable[..., Any]) -> Route:
    pattern = re.compile(re.sub(r"\{(\w+)\}", r"(?P<\1>[A-Za-z0-9._:-]+)", path))
    return (method, pattern, action)


H = Handler
ROUTES: list[Route] = [
    _route("POST", f"{AGENT_PREFIX}/enroll", H.agent_enroll),
    _route("GET", f"{AGENT_PREFIX}/stream", H.agent_stream),
    _route("POST", f"{AGENT_PREFIX}/uplink", H.agent_uplink),
    _route("GET", f"{AGENT_PREFIX}/logs/target", H.agent_logs_target),
    _route("POST", f"{AGENT_PREFIX}/logs/push", H.agent_logs_push),
    _route("GET", "/downloads/{name}", H.downloads),
    _route("POST", f"{AGENT_PREFIX}/relays/{{relay_id}}/v1/images/fetch", H.relay_fetch),
    _route("GET", f"{AGENT_PREFIX}/relays/{{relay_id}}/request", H.relay_request),
    _route("POST", f"{AGENT_PREFIX}/relays/{{relay_id}}/stream", H.relay_stream),
    _route("POST", f"{ADMIN_PREFIX}/relays", H.admin_relay),
    _route("POST", f"{ADMIN_PREFIX}/nodes/enrollment-tokens", H.admin_mint_token),
    _route("GET", f"{ADMIN_PREFIX}/nodes", H.admin_nodes),
    _route("GET", f"{ADMIN_PREFIX}/nodes/{{node_id}}", H.admin_node),
    _route("DELETE", f"{ADMIN_PREFIX}/nodes/{{node_id}}", H.admin_revoke),
    _route("POST", f"{ADMIN_PREFIX}/nodes/{{node_id}}/commands", H.admin_send_command),
    _route("GET", f"{ADMIN_PREFIX}/nodes/{{node_id}}/{{kind}}", H.admin_records),
    _route("GET", f"{ADMIN_PREFIX}/commands/{{command_id}}", H.admin_command),
    _route("POST", f"{ADMIN_PREFIX}/clusters/{{cluster}}", H.admin_set_cluster),
    _route("GET", f"{ADMIN_PREFIX}/clusters/{{cluster}}/traffic", H.admin_traffic),
    _route("POST", f"{ADMIN_PREFIX}/clusters/{{cluster}}/fanouts", H.admin_fanout),
    _route("GET", f"{ADMIN_PREFIX}/clusters/{{cluster}}/fanouts/{{fanout_id}}", H.admin_fanout_status),
    _route("GET", f"{ADMIN_PREFIX}/faults", H.admin_faults),
    _route("POST", f"{ADMIN_PREFIX}/faults", H.admin_faults),
    _route("GET", f"{ADMIN_PREFIX}/requests", H.admin_requests),
    _route("GET", f"{ADMIN_PREFIX}/stats", H.admin_stats),
]
RECORD_VIEWS = ("events", "heartbeats", "timeline", "inventory", "logs")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_server(
    backend: Backend, host: str, port: int, *, tls_cert: Path | None = None, tls_key: Path | None = None
) -> Server:
    handler = type("BoundHandler", (Handler,), {"backend": backend})
    server = Server((host, port), handler)
    if tls_cert is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(tls_cert), str(tls_key) if tls_key else None)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    return server
