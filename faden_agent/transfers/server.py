"""The holder's side of a peer transfer: an HTTP(S) server on ADVERTISE_HOST:
PEER_PORT, run by the peer worker only, so a long transfer never delays a heartbeat or a
command.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import docker
import orjson

from faden_agent import protocol
from faden_agent.engine.client import image_store
from faden_agent.http.serve.server import BoundedHandler, BoundedServer, RouteLimits, ServerLimits
from faden_agent.transfers import probe
from faden_agent.transfers.archive import (
    META_LIMIT,
    ChunkReader,
    entries,
    held_prefix,
    strip_held_layers,
    v1_layer_ids,
)
from faden_agent.transfers.oci import BLOB_PATH, kind_of
from faden_agent.transfers.tickets import PROBE_GRANT, TicketBox, TicketRefused, check_grant

if TYPE_CHECKING:
    from faden_agent.protocol.status import PeerServerStatus

log = logging.getLogger(__name__)

# The containerd store's layer files are read ahead of a transfer from its own save, within
# LOOKAHEAD_S (under the receiver's 30 s wait for the answer), and remembered per image.
LOOKAHEAD_S = 20.0
LAYER_PATHS_KEPT = 256
_LAYER_PATHS: dict[str, list[str]] = {}
REQUEST_LIMIT = 4 << 20  # the held chains of a machine with thousands of images fit
FRAME = 1 << 20


def byte_limit(image_size: int) -> int:
    """Most bytes an archive of an image of `image_size` may have (tar headers and padding)."""
    return int(image_size * 1.1) + (64 << 20)


def layer_sizes(api: docker.APIClient, image_id: str, layers: int) -> list[int] | None:
    """Each layer's size, base first, from the history (None when it does not map 1:1)."""
    sizes = [entry.get("Size") or 0 for entry in reversed(api.history(image_id))]
    nonzero = [s for s in sizes if s > 0]
    return nonzero if len(nonzero) == layers else None


def holder_stream(api: docker.APIClient, image_id: str, held: set[str]) -> tuple[dict[str, str], Iterator[bytes]]:
    """The response headers and the archive (docker save without the layers whose chain the
    receiver holds): what the peer port and the relay through the backend send."""
    details = api.inspect_image(image_id)  # NotFound: not on this machine
    diff_ids = list(details["RootFS"]["Layers"])
    size = int(details.get("Size") or 0)
    sizes = layer_sizes(api, image_id, len(diff_ids))
    skip = held_prefix(diff_ids, held)
    # the containerd store's layer files need its image store known (Descriptor: API 1.48+)
    containerd = skip > 0 and ("Descriptor" in details or image_store(api.info()) == "containerd")
    skip_names = held_layer_files(api, image_id, diff_ids, skip, containerd)
    headers = {
        "Content-Type": "application/x-tar",
        "X-Faden-Image-Id": image_id,
        "X-Faden-Bytes-Total": str(sum(sizes[skip:]) if sizes else size),
        "X-Faden-Byte-Limit": str(byte_limit(size)),
        "X-Faden-Layers-Sent": str(len(diff_ids) - (skip if skip_names else 0)),
    }
    return headers, strip_held_layers(ChunkReader(api.get_image(image_id, chunk_size=FRAME)), skip_names)


def held_layer_files(
    api: docker.APIClient, image_id: str, diff_ids: list[str], skip: int, containerd_store: bool
) -> set[str]:
    """The archive files of the first `skip` layers (those the receiver holds), unless a
    later layer is the same file: 20.10 names a layer's folder by its v1 id, the classic
    store of 25+ its blob by the diff id; the containerd store names it by the digest of
    the blob it holds (gzip'd when pulled), which only its own manifest.json tells."""
    if not skip:
        return set()
    if containerd_store:
        paths = saved_layer_paths(api, image_id)
        if len(paths) != len(diff_ids):
            return set()  # the full archive: the receiver checks it all the same
        return set(paths[:skip]) - set(paths[skip:])
    needed = set(diff_ids[skip:])  # 20.10 links a layer used twice to its first folder
    v1 = v1_layer_ids(diff_ids) + [""]
    return {
        name
        for i, diff_id in enumerate(diff_ids[:skip])
        if diff_id not in needed
        for name in (f"{v1[i]}/layer.tar", "blobs/sha256/" + diff_id.removeprefix("sha256:"))
    }


def saved_layer_paths(api: docker.APIClient, image_id: str, budget_s: float = LOOKAHEAD_S) -> list[str]:
    """The layer files of the engine's own docker save of the image, base first: from the
    manifest blob `image_id` names, or else manifest.json near the end, the layers skipped
    over ([] past `budget_s`: the receiver's read waits 30 s for the answer's head).
    Remembered per image id (content-addressed: never stale)."""
    if image_id in _LAYER_PATHS:
        return _LAYER_PATHS[image_id]
    deadline = time.monotonic() + budget_s
    chunks = api.get_image(image_id, chunk_size=FRAME)
    paths: list[str] = []
    try:
        for member, data in entries(ChunkReader(_until(chunks, deadline))):
            blob = BLOB_PATH.fullmatch(member.name)
            if member.isfile() and member.size <= META_LIMIT and blob and "sha256:" + blob.group(1) == image_id:
                document = orjson.loads(data.read(member.size))
                if kind_of(document) == "manifest":  # else an index: manifest.json names its platform's
                    paths = [
                        "blobs/sha256/" + str(d.get("digest", "")).removeprefix("sha256:") for d in document["layers"]
                    ]
                    break
            elif member.name == "manifest.json" and member.isfile() and member.size <= META_LIMIT:
                paths = [str(p) for p in orjson.loads(data.read(member.size))[0]["Layers"]]
                break
    except (TimeoutError, orjson.JSONDecodeError, LookupError, TypeError, AttributeError) as exc:
        log.info("no layer files of %s ahead of its save (%s): the whole archive is sent", image_id[:19], exc)
        return []
    finally:
        chunks.close()
    if len(_LAYER_PATHS) >= LAYER_PATHS_KEPT:
        _LAYER_PATHS.pop(next(iter(_LAYER_PATHS)))
    _LAYER_PATHS[image_id] = paths
    return paths


def _until(chunks: Iterator[bytes], deadline: float) -> Iterator[bytes]:
    for chunk in chunks:
        if time.monotonic() > deadline:
            raise TimeoutError("the engine's save took too long to read ahead")
        yield chunk


class ChunkedWriter:
    """HTTP/1.1 chunked framing over a socket file, in frames of about FRAME bytes."""

    def __init__(self, wfile: Any):
        self.wfile = wfile
        self.pending: list[bytes] = []
        self.size = 0
        self.sent = 0

    def write(self, data: bytes) -> None:
        if data:
            self.pending.append(data)
            self.size += len(data)
        if self.size >= FRAME:
            self.flush()

    def flush(self) -> None:
        if self.size:
            body = b"".join(self.pending)
            self.wfile.write(b"%x\r\n" % len(body) + body + b"\r\n")
            self.sent += len(body)
        self.pending, self.size = [], 0

    def close(self) -> None:
        self.flush()
        self.wfile.write(b"0\r\n\r\n")


# The peer port's bounds: heads, bodies and sessions under deadlines, a fixed pool of
# workers (transfers and probes), the waiting connections capped (http/serve).
LIMITS = ServerLimits(workers=16, backlog=32, max_waiting=4096, first_line_s=10.0, idle_s=30.0, keepalive_s=5.0)
FETCH_LIMITS = RouteLimits(head_s=10.0, body_bytes=REQUEST_LIMIT, body_s=30.0)
NO_BODY = RouteLimits(head_s=10.0, body_bytes=0, body_s=10.0)


def route_limits(method: str, path: str) -> RouteLimits:
    return FETCH_LIMITS if path == protocol.PEER_FETCH_PATH else NO_BODY


class PeerServer:
    def __init__(
        self, host: str, port: int, tickets: TicketBox, docker_client: Any, tls: tuple[str, str] | None = None
    ):
        self.tickets = tickets
        self.docker = docker_client  # a callable: a DockerClient for the calling thread
        self.active = 0
        self.served = 0
        self.bytes_sent = 0
        self.probes_active = 0
        self.probes_served = 0
        self.probe_limits = probe.LIMITS  # what one probe session may cost this machine
        self._lock = threading.Lock()
        context = None
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
        handler = type("Handler", (_Handler,), {"peer": self})
        self.httpd = BoundedServer((host, port), handler, limits=LIMITS, routes=route_limits, tls=context)

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def serve(self) -> None:
        # Woken by a connection or by shutdown(): an idle peer worker sleeps.
        self.httpd.serve_forever()

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def status(self) -> PeerServerStatus:
        return {
            "transfers_active": self.active,
            "transfers_served": self.served,
            "bytes_sent": self.bytes_sent,
            "probes_active": self.probes_active,
            "probes_served": self.probes_served,
            "connections": self.httpd.status(),
        }

    def probe_slot(self) -> bool:
        """Take one of probe.MAX_SESSIONS probe slots; False when all are taken."""
        with self._lock:
            if self.probes_active >= probe.MAX_SESSIONS:
                return False
            self.probes_active += 1
            return True

    def probe_done(self) -> None:
        with self._lock:
            self.probes_active -= 1
            self.probes_served += 1

    def count(self, active: int, served: int = 0, sent: int = 0) -> None:
        with self._lock:
            self.active += active
            self.served += served
            self.bytes_sent += sent


class _Handler(BoundedHandler):
    peer: PeerServer

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("peer %s: " + fmt, self.client_address[0], *args)

    def refuse_request(self, status: int, reason: str, message: str) -> None:
        self._refuse(status, reason, message)

    def _refuse(self, status: int, reason: str, message: str) -> None:
        body = orjson.dumps({"reason": reason, "message": message})
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        log.info("peer %s refused: %s (%s)", self.client_address[0], reason, message)

    def _ticket(self) -> str:
        return (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()

    def do_POST(self) -> None:
        if self.path == probe.PATH:
            return self._probe()
        if self.path != protocol.PEER_FETCH_PATH:
            return self._refuse(404, "not_found", f"no such path {self.path[:100]}")
        if not 0 < self.body_length <= REQUEST_LIMIT:
            return self._refuse(400, "bad_request", f"a request body of 1..{REQUEST_LIMIT} bytes is needed")
        try:  # from the headers, before a byte of the body is read: spent whatever follows
            grant = self.peer.tickets.spend(self._ticket(), self.client_address[0])
        except TicketRefused as refused:
            return self._refuse(401, refused.reason, refused.message)
        try:
            request = orjson.loads(self.rfile.read(self.body_length))
            image_id, held = str(request["image_id"]), {str(c) for c in request.get("held_chains") or ()}
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return self._refuse(400, "bad_request", "the body must be JSON with image_id and held_chains")
        try:
            check_grant(grant, image_id)
        except TicketRefused as refused:
            return self._refuse(401, refused.reason, refused.message)
        try:
            headers, archive = holder_stream(self.peer.docker().api, image_id, held)
        except docker.errors.NotFound:
            return self._refuse(404, "image_not_found", f"image {image_id[:100]} is not on this machine")
        self.send_response(200)
        for name, value in {**headers, "Transfer-Encoding": "chunked", "Connection": "close"}.items():
            self.send_header(name, value)
        self.end_headers()
        self.close_connection = True
        self.conn.deadline = float("inf")  # each write still waits at most the idle bound
        writer = ChunkedWriter(self.wfile)
        self.peer.count(+1)
        try:
            for piece in archive:
                writer.write(piece)
            writer.close()
            log.info(
                "served %s to %s: %d bytes, %s of its layers",
                image_id[:19],
                self.client_address[0],
                writer.sent,
                headers["X-Faden-Layers-Sent"],
            )
        except Exception as exc:  # noqa: BLE001 - one transfer's end, never the server's
            # the receiver went away, or the engine failed: the receiver sees a cut stream
            log.warning("serving %s to %s ended early: %s", image_id[:19], self.client_address[0], exc)
        finally:
            self.peer.count(-1, served=1, sent=writer.sent)

    def _probe(self) -> None:
        """One active probe session (transfers/probe.py): the ticket, then the upgraded connection."""
        self.close_connection = True
        if (self.headers.get("Upgrade") or "").strip() != probe.UPGRADE:
            return self._refuse(400, "bad_request", f"a probe needs Upgrade: {probe.UPGRADE}")
        try:  # the ticket first: a flood without one never holds a probe slot
            self.peer.tickets.take(self._ticket(), PROBE_GRANT, self.client_address[0])
        except TicketRefused as refused:
            return self._refuse(401, refused.reason, refused.message)
        if not self.peer.probe_slot():
            return self._refuse(503, "peer_busy", f"{probe.MAX_SESSIONS} probes are running here")
        try:
            self.send_response(101)
            self.send_header("Connection", "Upgrade")
            self.send_header("Upgrade", probe.UPGRADE)
            limits = self.peer.probe_limits
            self.send_header("X-Faden-Probe-Max-Bytes", str(limits.bytes))
            self.send_header("X-Faden-Probe-Max-Seconds", f"{limits.seconds:g}")
            self.send_header("X-Faden-Probe-Max-Echoes", str(limits.echoes))
            self.end_headers()
            session = probe.serve(self.conn, limits)
            log.info(
                "probed by %s: %d echoes, %d bytes received, %d sent",
                self.client_address[0],
                session.echoes,
                session.received,
                session.sent,
            )
        finally:
            self.peer.probe_done()
