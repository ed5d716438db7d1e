"""The agent protocol (docs/protocol.md) as the reference backend serves it: enrollment, the
command stream, the uplink of records and the log push. Image relays: api_relay.py."""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson

from faden_agent import protocol
from faden_agent.devbackend.builds import served_version
from faden_agent.devbackend.loki_relay import forward_to_loki
from faden_agent.devbackend.rotation import Contested
from faden_agent.devbackend.store import TokenRefused
from faden_agent.devbackend.web import HttpError, Request, Route, route
from faden_agent.protocol.inventory import ACCEPTS_CHANGES, ACCEPTS_GZIP

log = logging.getLogger("faden_agent.devbackend")

KEEPALIVE_RANGE = (0.2, 300.0)
ARCHES = ("x86_64", "aarch64")  # what install.sh asks for (uname -m, its aliases folded)
STREAM_POLL_S = 0.2


def enroll(req: Request) -> int:
    req.backend.faults.refuse_in_maintenance()
    body = req.read_json()
    token = body.pop("token", None)
    if not isinstance(token, str) or not token:
        raise HttpError(400, "bad_body", "enrollment needs a token")
    if not isinstance(body.get("agent_id"), str) or not body["agent_id"]:
        raise HttpError(400, "bad_body", "enrollment needs an agent_id")
    attempt = body.pop("enrollment_id", None)
    try:
        node_id, credential = req.backend.store.enroll(token, body, attempt if isinstance(attempt, str) else None)
    except TokenRefused as exc:
        raise HttpError(403, "token_refused", str(exc)) from None
    log.info("enrolled agent %s as %s", body["agent_id"], node_id)
    return req.send_json(200, {"node_id": node_id, "credential": credential, "protocol": protocol.PROTOCOL_VERSION})


def stream(req: Request) -> int:
    node_id = req.require_node(stream=True)
    backend = req.backend
    try:
        after = int(req.query.get("after", "0"))
        keepalive = float(req.query.get("keepalive", backend.keepalive_sec))
    except ValueError:
        raise HttpError(400, "bad_query", "after must be an integer and keepalive a number") from None
    keepalive = min(max(keepalive, KEEPALIVE_RANGE[0]), KEEPALIVE_RANGE[1])
    try:  # the next credential (docs/protocol.md, Credential rotation): to one stream only
        rotation = backend.store.credential_for_stream(node_id)
    except Contested as exc:
        raise HttpError(401, "shared_identity", str(exc)) from None
    faults = backend.faults
    generation = faults.drop_generation
    req.send_response(200)
    req.send_header("Content-Type", "application/x-ndjson")
    req.send_header("Transfer-Encoding", "chunked")
    req.send_header("Cache-Control", "no-store")
    req.end_headers()
    req.wfile.flush()
    req.close_connection = True
    req.log_agent_request(200)  # now, not at its end
    if faults.stall_streams:
        return _stall(req, generation)
    hello = {
        "type": "hello",
        "node_id": node_id,
        "keepalive_sec": keepalive,
        "after": after,
        "epoch": backend.store.epoch,
        "high_seq": backend.store.high_seq(),
        "expected": _expected(backend, node_id),
        "accepts": [ACCEPTS_CHANGES, ACCEPTS_GZIP],  # what this backend understands (docs/protocol.md)
    }
    _write_line(req, hello)
    if rotation is not None:
        _write_line(req, {"type": "credential", "credential": rotation})
    last_write = time.monotonic()
    peers_sent_at = None  # the cluster generation the last `peers` message reflects
    while True:
        if peers_sent_at != backend.cluster_generation:
            peers_sent_at = backend.cluster_generation
            _write_line(req, backend.store.peers_message(node_id))
        if node_id in backend.store.inventory_behind:  # the agent's next inventory record is full
            backend.store.inventory_behind.discard(node_id)
            _write_line(req, {"type": "inventory.full"})
        if (
            faults.drop_generation != generation
            or faults.maintenance_retry_after is not None
            or node_id in backend.store.contested  # its next stream is refused, saying why
        ):
            req.connection.shutdown(2)  # abrupt: like a crashed server or a cut link
            return 200
        if faults.stall_streams:
            return _stall(req, generation)
        for command in backend.store.commands_after(node_id, after):
            _write_line(req, command)
            after = command["seq"]
            last_write = time.monotonic()
        if time.monotonic() - last_write >= keepalive:
            _write_line(req, {"type": "keepalive", "ts": time.time()})
            last_write = time.monotonic()
        with backend.new_commands:
            backend.new_commands.wait(min(STREAM_POLL_S, keepalive))


def _expected(backend: Any, node_id: str) -> dict[str, Any]:
    """What the node should run: the admin's expectations, else the build this backend serves
    for its architecture and every capability this project's agent has."""
    node = backend.store.node(node_id) or {}
    machine = (node.get("platform") or {}).get("machine")
    capabilities = backend.expectations.get("capabilities")
    return {
        "version": _expected_version(backend, machine),
        "capabilities": list(protocol.CAPABILITIES) if capabilities is None else capabilities,
    }


def _expected_version(backend: Any, machine: str | None) -> str | None:
    return backend.expectations.get("version") or served_version(backend.downloads, machine)


def expected_version(req: Request) -> int:
    """No credential: the installer asks before it has one (docs/protocol.md, "Expected version")."""
    arch = req.query.get("arch", "")
    if arch not in ARCHES:
        raise HttpError(400, "bad_query", f"arch must be one of {', '.join(ARCHES)}")
    return req.send_json(200, {"arch": arch, "version": _expected_version(req.backend, arch)})


def _stall(req: Request, generation: int) -> int:
    """Headers sent, then silence (a hung proxy or server), until the streams are dropped
    or the stall is switched off (then cut, so no thread waits forever on a gone client)."""
    faults = req.backend.faults
    while faults.drop_generation == generation and faults.stall_streams:
        time.sleep(STREAM_POLL_S)
    req.connection.shutdown(2)
    return 200


def _write_line(req: Request, obj: Any) -> None:
    data = orjson.dumps(obj) + b"\n"
    req.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    req.wfile.flush()


def uplink(req: Request) -> int:
    node_id = req.require_node()
    body = req.read_json()
    records = body.get("records")
    if not isinstance(records, list):
        raise HttpError(400, "bad_body", "body needs a list 'records'")
    valid = [r for r in records if _valid_record(r)]
    acked = req.backend.store.store_records(node_id, valid)
    if any(r["kind"] == protocol.HOST_REQUEST for r in valid):  # answered with a command (host_requests.py)
        req.backend.notify_streams()
    # Malformed records are named back (when they have an id) so the agent can drop them.
    rejected = [
        r["id"] for r in records if not _valid_record(r) and isinstance(r, dict) and isinstance(r.get("id"), str)
    ]
    return req.send_json(200, {"acked": acked, "rejected": rejected})


def _valid_record(record: Any) -> bool:
    return (
        isinstance(record, dict)
        and isinstance(record.get("id"), str)
        and bool(record["id"])
        and isinstance(record.get("kind"), str)
        and isinstance(record.get("data"), dict)
    )


def logs_target(req: Request) -> int:
    req.require_node()
    if req.backend.loki_url:
        answer = {"mode": "loki", "url": req.backend.loki_url}
        if req.backend.loki_tenant:
            answer["tenant"] = req.backend.loki_tenant
        return req.send_json(200, answer)
    return req.send_json(200, {"mode": "push", "path": protocol.LOGS_PUSH_PATH})


def logs_push(req: Request) -> int:
    node_id = req.require_node()
    if req.backend.loki_url:
        return forward_to_loki(req, req.backend.loki_url, req.backend.loki_tenant)
    try:
        push = orjson.loads(req.read_body())
    except orjson.JSONDecodeError as exc:
        raise HttpError(400, "bad_body", f"push body is not JSON: {exc}") from None
    if not isinstance(push, dict) or not isinstance(push.get("streams"), list):
        raise HttpError(400, "bad_body", "push body needs a list 'streams'")
    try:
        req.backend.store.store_log_push(node_id, push)
    except (TypeError, IndexError, AttributeError) as exc:
        raise HttpError(400, "bad_body", f"malformed stream entry: {exc}") from None
    return req.send_empty(204)


ROUTES: list[Route] = [
    route("POST", protocol.ENROLL_PATH, enroll),
    route("GET", protocol.STREAM_PATH, stream),
    route("GET", protocol.EXPECTED_VERSION_PATH, expected_version),
    route("POST", protocol.UPLINK_PATH, uplink),
    route("GET", protocol.LOGS_TARGET_PATH, logs_target),
    route("POST", protocol.LOGS_PUSH_PATH, logs_push),
]
