"""Hostile peers for image.fetch: small real HTTP servers that speak the peer protocol wrongly
on purpose (dripping, lying about the size, redirecting, sending another image, endless), an
honest one, and small images made for a test and taken off the engine so a fetch must bring
them back. Used by the hostile-peer tests and the chaos run."""

from __future__ import annotations

import io
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler

from faden_agent import protocol
from tests.support.scriptedhttp import LocalHTTP

MiB = 1 << 20
HEX = "ab" * 32

Script = Callable[["ScriptedPeer", BaseHTTPRequestHandler], None]


class ScriptedPeer(LocalHTTP):
    """Answers every POST with `script(handler)`; counts the bytes it managed to send."""

    def __init__(self, script: Callable[[BaseHTTPRequestHandler], None]):
        self.script = script
        self.sent = 0
        self.requests = 0
        self.stop = threading.Event()
        super().__init__()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        peer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                peer.requests += 1
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    peer.script(self)
                except OSError:
                    pass  # the receiver hung up: what a hostile peer is told
                self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        return Handler

    def head(self, handler: BaseHTTPRequestHandler, image_id: str, **headers: str) -> None:
        handler.send_response(200)
        handler.send_header("X-Faden-Image-Id", image_id)
        for name, value in headers.items():
            handler.send_header(name.replace("_", "-"), value)
        handler.send_header("Connection", "close")
        handler.end_headers()

    def stream(self, handler: BaseHTTPRequestHandler, pieces: Iterator[bytes]) -> None:
        for piece in pieces:
            if self.stop.is_set():
                return
            handler.wfile.write(piece)
            self.sent += len(piece)

    def close(self) -> None:
        self.stop.set()
        super().close()


def scripted(script: Script) -> ScriptedPeer:
    """A peer answering with `script(peer, handler)`."""
    peer: ScriptedPeer = ScriptedPeer(lambda handler: script(peer, handler))
    return peer


# --- what a peer answers


def honest(image_id: str, archive: bytes) -> Script:
    """Sends `archive` as `image_id` (the archive of another image: a lie of the worst kind)."""

    def script(peer: ScriptedPeer, handler: BaseHTTPRequestHandler) -> None:
        peer.head(handler, image_id, Content_Length=str(len(archive)), X_Faden_Bytes_Total=str(len(archive)))
        peer.stream(handler, iter([archive]))

    return script


def drip(image_id: str) -> Script:
    """A byte every half second, for ever: never idle long enough for a read timeout."""

    def script(peer: ScriptedPeer, handler: BaseHTTPRequestHandler) -> None:
        peer.head(handler, image_id)
        while not peer.stop.is_set():
            handler.wfile.write(b"\0")
            peer.sent += 1
            time.sleep(0.5)

    return script


def redirect_to(target: ScriptedPeer) -> Script:
    def script(peer: ScriptedPeer, handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(307)
        handler.send_header("Location", target.url + protocol.PEER_FETCH_PATH)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    return script


def claims_a_petabyte(image_id: str) -> Script:
    """Announces a petabyte (bytes and limit), then sends 1 KiB of zeros and hangs up."""

    def script(peer: ScriptedPeer, handler: BaseHTTPRequestHandler) -> None:
        peer.head(handler, image_id, X_Faden_Bytes_Total=str(1 << 50), X_Faden_Byte_Limit=str(1 << 50))
        peer.stream(handler, iter([b"\0" * 1024]))

    return script


def endless_layer() -> Iterator[bytes]:
    member = tarfile.TarInfo(f"{HEX}/layer.tar")
    member.size = 1 << 40
    yield member.tobuf(tarfile.PAX_FORMAT)  # a PAX size record, as Go writes for 8 GiB or more
    zeros = bytes(MiB)
    while True:
        yield zeros


def endless(image_id: str) -> Script:
    """Announces a small image and streams an endless layer."""

    def script(peer: ScriptedPeer, handler: BaseHTTPRequestHandler) -> None:
        peer.head(handler, image_id, X_Faden_Bytes_Total=str(MiB), X_Faden_Byte_Limit=str(1 << 50))
        peer.stream(handler, endless_layer())

    return script


# --- images made for a test


def make_image(docker_client, payload_bytes: int = 0) -> tuple[str, str]:
    """A one-layer image of a unique marker (and `payload_bytes` of zeros): (repository:tag, id)."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as out:
        content = uuid.uuid4().hex.encode()
        member = tarfile.TarInfo("marker")
        member.size = len(content)
        out.addfile(member, io.BytesIO(content))
        if payload_bytes:
            member = tarfile.TarInfo("payload")
            member.size = payload_bytes
            out.addfile(member, io.BytesIO(bytes(payload_bytes)))
    reference = f"faden-test/hostile-{uuid.uuid4().hex[:10]}:1"
    repository, tag = reference.rsplit(":", 1)
    docker_client.api.import_image_from_data(data.getvalue(), repository=repository, tag=tag)
    return reference, docker_client.images.get(reference).id


def absent_image(docker_client) -> tuple[str, bytes]:
    """A small image's id and `docker save` archive (by id, no tags), removed from the engine
    so that a fetch must bring it back."""
    reference, image_id = make_image(docker_client)
    archive = b"".join(docker_client.api.get_image(image_id))
    docker_client.images.remove(reference, force=True)
    return image_id, archive


def remove_image(docker_client, image_id: str) -> None:
    """Off the engine if there (a test's own image only)."""
    try:
        docker_client.images.remove(image_id, force=True)
    except Exception:  # noqa: BLE001 - absent already
        pass
