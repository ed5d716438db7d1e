"""The receiver's side of a peer transfer: one image from one peer, checked entry by entry
on its way into `docker load` (archive.ArchiveVerifier), then tagged. Nothing the peer says
is trusted: the byte limit is the command's, nothing is followed or decoded, a watchdog cuts
a stalled or stopped transfer. Every way one peer fails is a PeerFailure(reason); the caller
then tries the next peer (reasons: docs/commands.md, image.fetch)."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import docker
import orjson

from faden_agent import protocol
from faden_agent.common.errorline import error_line
from faden_agent.common.failure import Stopped
from faden_agent.disk.diskspace import NoSpace, require_space
from faden_agent.transfers import wire
from faden_agent.transfers.archive import (
    ArchiveVerifier,
    ChunkReader,
    IntegrityError,
    chain_ids,
)
from faden_agent.transfers.watchdog import Watchdog
from faden_agent.transfers.wire import PeerFailure

READ_TIMEOUT_S = 30  # one read of the peer's answer waits at most this long
# A peer that delivers less than STALL_BYTES in STALL_S is given up on (a byte now and then
# does not keep a transfer alive).
STALL_S = 30.0
STALL_BYTES = 64 << 10
WATCH_S = 0.2  # how soon a stop or a stall shuts the socket
PROGRESS_INTERVAL_S = 1.0
KNOWN_REFUSALS = ("ticket_refused", "ticket_expired", "image_not_found")

__all__ = [
    "NoSpace",
    "PeerFailure",
    "Stopped",
    "Transfer",
    "check_space",
    "held_chains",
    "local_image",
    "tag_image",
]


# docker load unpacks the archive into a temporary directory of the data root, then into the
# layer store: about twice what crosses the wire (plus diskspace's margin).
SPACE_FACTOR = 2


def check_space(api: docker.APIClient, size: int) -> None:
    """NoSpace when the engine's data root cannot take an image of `size` bytes (the
    command's figure; a peer's claim is never asked)."""
    require_space(api, size * SPACE_FACTOR, f"the image ({size} bytes, unpacked twice by docker load)")


def held_chains(api: docker.APIClient) -> set[str]:
    """Every layer chain the local engine holds (each prefix of each image's layers)."""
    held: set[str] = set()
    for image in api.images(all=True):
        try:
            held.update(chain_ids(list(api.inspect_image(image["Id"])["RootFS"]["Layers"])))
        except (docker.errors.NotFound, KeyError):
            continue
    return held


def tag_image(api: docker.APIClient, image_id: str, reference: str | None) -> None:
    """The receiver tags the image itself (the archive may tag nothing)."""
    if reference:
        repository, _, tag = (
            reference.rpartition(":") if ":" in reference.rsplit("/", 1)[-1] else (reference, "", "latest")
        )
        api.tag(image_id, repository, tag, force=True)


@dataclass
class Transfer:
    """One image from one peer into the local engine, at most `byte_limit` bytes (the
    command's bound, from what the backend knows of the image)."""

    api: docker.APIClient
    image_id: str
    reference: str | None
    verify: bool | str
    on_progress: Callable[[dict[str, Any]], None]
    should_stop: Callable[[], bool]
    byte_limit: int
    on_abort: Callable[[Callable[[], None]], None] = lambda hook: None
    on_written: Callable[[int], None] = lambda size: None  # may raise NoSpace: the transfer stops
    figures: dict[str, Any] = field(default_factory=dict)

    def run(self, peer: dict[str, str]) -> dict[str, Any]:
        source = urlsplit(peer["address"]).netloc
        held = held_chains(self.api)
        sock = wire.connect(peer["address"], self.verify)
        started = time.monotonic()
        self.figures = {"bytes_done": 0, "next": started, "mark": (started, 0)}
        self.on_abort(lambda: wire.shut(sock))
        self.cut: BaseException | None = None
        try:
            with Watchdog("fetch-watch", self._hold_up, lambda: wire.shut(sock), WATCH_S) as watchdog:
                self.watchdog = watchdog
                try:
                    sock.settimeout(READ_TIMEOUT_S)
                    rfile = sock.makefile("rb")
                    headers = self._request(sock, rfile, peer, held, source)
                    # the peer's size is shown as progress only, never a bound
                    total = min(_number(headers.get("x-faden-bytes-total")), self.byte_limit)
                    verifier = ArchiveVerifier(
                        self.image_id,
                        self.reference,
                        held,
                        self.byte_limit,
                        lambda n: self._on_bytes(source, n, total),
                        engine_platform(self.api),
                    )
                    body = ChunkReader(wire.body(rfile, headers, source))
                    self._load(self._guarded(verifier.verified(body), source))
                    loaded = loaded_image(self.api, verifier)
                except Exception as exc:  # noqa: BLE001 - named by _cut_reason, as the cut stream's
                    raise self._cut_reason(source, exc) from None
        finally:
            sock.close()
        elapsed = time.monotonic() - started
        self._progress(source, self.figures["bytes_done"], total, elapsed)
        tag_image(self.api, loaded, self.reference)
        return {
            "image_id": self.image_id,
            "engine_image_id": loaded,
            "source": source,
            "bytes_received": self.figures["bytes_done"],
            "layers_received": verifier.layers_received,
            "seconds": round(elapsed, 2),
        }

    def _request(
        self, sock: socket.socket, rfile: Any, peer: dict[str, str], held: set[str], source: str
    ) -> dict[str, str]:
        """Send the fetch; the 200 answer's headers, or PeerFailure (a refusal, a redirect)."""
        body = orjson.dumps({"image_id": self.image_id, "held_chains": sorted(held)})
        sock.sendall(
            (
                f"POST {fetch_path(peer['address'])} HTTP/1.1\r\nHost: {source}\r\n"
                f"Authorization: Bearer {peer['ticket']}\r\nContent-Type: application/json\r\n"
                f"Accept-Encoding: identity\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode()
            + body
        )
        status, headers = wire.read_head(rfile)
        if status != 200:
            answer = wire.refusal(rfile, headers) if not 300 <= status < 400 else {}
            reason = str(answer.get("reason") or answer.get("error") or "")[:40]
            message = str(answer.get("message") or f"HTTP {status}")[:300]
            if 300 <= status < 400:
                message = f"HTTP {status}, a redirect (not followed)"
            raise PeerFailure(
                reason if reason in KNOWN_REFUSALS else "peer_failed", f"peer {source} refused: {message}"
            )
        if headers.get("x-faden-image-id") != self.image_id:
            raise PeerFailure("integrity_failed", f"peer {source} offers another image than {self.image_id}")
        return headers

    def _on_bytes(self, source: str, n: int, total: int) -> None:
        figures = self.figures
        figures["bytes_done"] += n
        now = time.monotonic()
        if now >= figures["next"]:
            figures["next"] = now + PROGRESS_INTERVAL_S
            self._progress(source, figures["bytes_done"], total, now - figures["mark"][0])

    def _hold_up(self) -> str | None:
        """The watchdog's question: a reason to cut the transfer now, or None."""
        if self.should_stop():
            return "stopped"
        now, done = time.monotonic(), self.figures["bytes_done"]
        marked_at, marked_bytes = self.figures["mark"]
        if now - marked_at >= STALL_S:
            if done - marked_bytes < STALL_BYTES:
                return f"stalled: {done - marked_bytes} bytes in {STALL_S:g} s"
            self.figures["mark"] = (now, done)
        return None

    def _guarded(self, chunks: Iterator[bytes], source: str) -> Iterator[bytes]:
        """The verified archive, cut (by raising) on a check that fails, a broken stream, or
        a stop; the exception is kept, as the HTTP client may report it otherwise."""
        try:
            for chunk in chunks:
                if self.should_stop():
                    raise Stopped()
                self.on_written(len(chunk))
                yield chunk
        except Exception as exc:  # noqa: BLE001 - tarfile's errors of a malformed stream too
            self.cut = self._cut_reason(source, exc)
            raise self.cut from None

    def _cut_reason(self, source: str, exc: Exception) -> BaseException:
        """What a cut stream means: stopped, stalled (a socket the watchdog shut reads as a
        cut archive), the peer's own failure, or a broken or malformed stream."""
        if self.should_stop():
            return Stopped()
        if self.watchdog.reason:
            return PeerFailure("peer_failed", f"peer {source} {self.watchdog.reason}")
        if isinstance(exc, (PeerFailure, Stopped, NoSpace)):
            return exc
        if isinstance(exc, IntegrityError):
            return PeerFailure("integrity_failed", f"peer {source}: {exc}")
        if isinstance(exc, OSError):
            done = self.figures["bytes_done"]
            return PeerFailure(
                "peer_failed", f"the stream from peer {source} broke after {done} bytes ({type(exc).__name__})"
            )
        return PeerFailure(
            "integrity_failed", f"peer {source}: not a valid image archive ({error_line(exc, named=True)})"
        )

    def _load(self, archive: Iterator[bytes]) -> None:
        try:
            for line in self.api.load_image(archive):
                if isinstance(line, dict) and line.get("error"):
                    raise PeerFailure("peer_failed", f"the engine refused the archive: {str(line['error'])[:300]}")
        except PeerFailure:
            if self.cut is not None:
                raise self.cut from None
            raise
        except Exception as exc:  # noqa: BLE001 - whatever the client made of the cut
            if self.cut is not None:
                raise self.cut from None
            raise PeerFailure("peer_failed", f"docker load failed: {error_line(exc, 300, named=True)}") from None
        if self.cut is not None:
            raise self.cut

    def _progress(self, source: str, done: float, total: int, elapsed: float) -> None:
        self.on_progress(
            {
                "phase": "fetch",
                "source": source,
                "bytes_done": done,
                "bytes_total": total,
                "rate_bps": int(done / elapsed) if elapsed > 0 else 0,
            }
        )


def local_image(api: docker.APIClient, image_id: str) -> str | None:
    """The local engine's id of the image `image_id` names, or None: the id itself (a config
    digest on the classic store, a manifest or index digest on the containerd store), or a
    classic-store image pulled by that manifest digest (its RepoDigests)."""
    try:
        return str(api.inspect_image(image_id)["Id"])
    except docker.errors.NotFound:
        pass
    for image in api.images(all=True):
        if any(str(d).endswith("@" + image_id) for d in image.get("RepoDigests") or ()):
            return str(image["Id"])
    return None


def engine_platform(api: docker.APIClient) -> tuple[str, str]:
    """The engine's (os, architecture): which manifest of an image index it runs."""
    try:
        version = api.version()
        return str(version.get("Os") or "linux"), str(version.get("Arch") or "amd64")
    except (docker.errors.DockerException, OSError):
        return "linux", "amd64"


def loaded_image(api: docker.APIClient, verifier: ArchiveVerifier) -> str:
    """The id the engine gave the image just loaded: the one asked for, or what its store
    names it by (the classic store: the config digest; the containerd store: the manifest
    or index that index.json points to), holding exactly the layers verified."""
    for candidate in verifier.engine_ids:
        try:
            details = api.inspect_image(candidate)
        except docker.errors.NotFound:
            continue
        if list(details["RootFS"]["Layers"]) != verifier.diff_ids:
            raise PeerFailure("integrity_failed", f"the engine holds {candidate[:19]} with other layers than loaded")
        return str(details["Id"])
    raise PeerFailure("integrity_failed", f"the engine did not load {verifier.image_id}")


def fetch_path(address: str) -> str:
    """The request path: the address's own path (a relay through the backend has one), then
    the fetch route; anything but plain URL path characters is the peer's failure."""
    path = urlsplit(address).path.rstrip("/") + protocol.PEER_FETCH_PATH
    if not _SAFE_PATH.fullmatch(path):
        raise PeerFailure("peer_failed", f"peer address {address[:200]!r} has a path that cannot be sent")
    return path


_SAFE_PATH = re.compile(r"[A-Za-z0-9/._~%:@!$&'()*+,;=-]{1,2048}")


def _number(text: str | None) -> int:
    return int(text) if text and text.isdigit() and len(text) < 20 else 0
