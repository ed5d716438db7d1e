"""The holder's side of a peer transfer: an HTTP(S) server on ADVERTISE_HOST:
PEER_PORT, run by the peer worker only, so a long transfer never delays a heartbeat or a
command.
Notes (why, figures, history): docs/design-notes.md.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import docker
import orjson

from faden_agent import protocol
from faden_agent.peer import probe
from faden_agent.peer.archive import (
    ChunkReader,
    held_prefix,
    strip_held_layers,
    v1_layer_ids,
)
from faden_agent.peer.tickets import PROBE_GRANT, TicketBox, TicketRefused

log = logging.getLogger(__name__)
SAFETY_POLL_S = 30.0  # serve_forever's timer, only a safety net (shutdown() wakes it)
SHUTDOWN_WAIT_S = 2.0

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
    skip_dirs = set(v1_layer_ids(diff_ids)[:skip])
    headers = {
        "Content-Type": "application/x-tar",
        "X-Faden-Image-Id": image_id,
        "X-Faden-Bytes-Total": str(sum(sizes[skip:]) if sizes else size),
        "X-Faden-Byte-Limit": str(byte_limit(size)),
        "X-Faden-Layers-Sent": str(len(diff_ids) - len(skip_dirs)),
    }
    return headers, strip_held_layers(ChunkReader(api.get_image(image_id, chunk_size=FRAME)), skip_dirs)


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
        handler = type("Handler", (_Handler,), {"peer": self})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def serve(self) -> None:
        # Woken by a connection, or by shutdown() shutting the listening socket down: an idle
        # peer worker sleeps (issue 16; serve_forever's 0.5 s poll woke it twice a second).
        self.httpd.serve_forever(poll_interval=SAFETY_POLL_S)

    def shutdown(self) -> None:
        stopper = threading.Thread(target=self.httpd.shutdown, name="peer-serve-stop", daemon=True)
        stopper.start()  # sets serve_forever's stop flag, then waits for the loop to end
        try:
            self.httpd.socket.shutdown(socket.SHUT_RDWR)  # wakes the loop's select at once
        except OSError:
            pass  # not listening (never was, or closed): the safety poll ends the loop
        stopper.join(SHUTDOWN_WAIT_S)
        self.httpd.server_close()

    def status(self) -> dict[str, Any]:
        return {
            "transfers_active": self.active,
            "transfers_served": self.served,
            "bytes_sent": self.bytes_sent,
            "probes_active": self.probes_active,
            "probes_served": self.probes_served,
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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    peer: PeerServer

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("peer %s: " + fmt, self.client_address[0], *args)

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
        length_text = self.headers.get("Content-Length") or "0"
        length = int(length_text) if length_text.isdigit() else 0  # a non-number: refused below, not a traceback
        if not 0 < length <= REQUEST_LIMIT:
            return self._refuse(400, "bad_request", f"a request body of 1..{REQUEST_LIMIT} bytes is needed")
        try:
            request = orjson.loads(self.rfile.read(length))
            image_id, held = str(request["image_id"]), {str(c) for c in request.get("held_chains") or ()}
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return self._refuse(400, "bad_request", "the body must be JSON with image_id and held_chains")
        try:
            self.peer.tickets.take(self._ticket(), image_id, self.client_address[0])
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
        """One active probe session (peer/probe.py): the ticket, then the upgraded connection."""
        self.close_connection = True
        if (self.headers.get("Upgrade") or "").strip() != probe.UPGRADE:
            return self._refuse(400, "bad_request", f"a probe needs Upgrade: {probe.UPGRADE}")
        if not self.peer.probe_slot():
            return self._refuse(503, "peer_busy", f"{probe.MAX_SESSIONS} probes are running here")
        try:
            try:
                self.peer.tickets.take(self._ticket(), PROBE_GRANT, self.client_address[0])
            except TicketRefused as refused:
                return self._refuse(401, refused.reason, refused.message)
            self.send_response(101)
            self.send_header("Connection", "Upgrade")
            self.send_header("Upgrade", probe.UPGRADE)
            limits = self.peer.probe_limits
            self.send_header("X-Faden-Probe-Max-Bytes", str(limits.bytes))
            self.send_header("X-Faden-Probe-Max-Seconds", f"{limits.seconds:g}")
            self.send_header("X-Faden-Probe-Max-Echoes", str(limits.echoes))
            self.end_headers()
            session = probe.serve(self.connection, self.rfile, self.wfile, limits)
            log.info(
                "probed by %s: %d echoes, %d bytes received, %d sent",
                self.client_address[0],
                session.echoes,
                session.received,
                session.sent,
            )
        finally:
            self.peer.probe_done()
