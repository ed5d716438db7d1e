"""The receiver's side of a peer transfer: fetch an image from one peer, checked
entry by entry on its way into the engine's `docker load` (archive.ArchiveVerifier), then
tag it. Runs in an executor scheduler thread (image.fetch, or the peers fallback of
image.pull / container.run).
Notes (why, figures, history): docs/design-notes.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import docker
import requests

from faden_agent import protocol
from faden_agent.diskspace import require_space
from faden_agent.errorline import error_line
from faden_agent.failure import Failure
from faden_agent.peer.archive import (
    ArchiveVerifier,
    ChunkReader,
    IntegrityError,
    chain_ids,
)
from faden_agent.peer.server import byte_limit

CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 60  # a holder whose engine stalls this long is given up on
PROGRESS_INTERVAL_S = 1.0
# docker load unpacks the archive into a temporary directory of the data root, then into the
# layer store: about twice what crosses the wire (plus diskspace's margin).
SPACE_FACTOR = 2


class PeerFailure(Failure):
    """An image fetch from peers failed; reason is the command's."""


class Stopped(Exception):
    """should_stop() said so (cancelled, deadline): the load is cut, nothing is kept."""


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
    """One image from one peer into the local engine."""

    api: docker.APIClient
    image_id: str
    reference: str | None
    verify: bool | str
    on_progress: Callable[[dict[str, Any]], None]
    should_stop: Callable[[], bool]
    cut: BaseException | None = None  # why the archive stream was cut (set by _guarded, read by _load)

    def run(self, peer: dict[str, str]) -> dict[str, Any]:
        source = urlsplit(peer["address"]).netloc
        held = held_chains(self.api)
        response = self._request(peer, held, source)
        with response:
            try:  # the peer's headers: a non-number is that peer's failure, not ours
                total = max(0, int(response.headers.get("X-Faden-Bytes-Total") or 0))
                limit = int(response.headers.get("X-Faden-Byte-Limit") or byte_limit(total))
            except ValueError:
                raise PeerFailure("peer_failed", f"peer {source} sent a malformed size header") from None
            self._check_space(total, source)
            started = time.monotonic()
            figures: dict[str, float] = {"bytes_done": 0, "next": started}

            def on_bytes(n: int) -> None:
                figures["bytes_done"] += n
                now = time.monotonic()
                if now >= figures["next"]:
                    figures["next"] = now + PROGRESS_INTERVAL_S
                    self._progress(source, figures["bytes_done"], total, now - started)

            verifier = ArchiveVerifier(self.image_id, self.reference, held, limit, on_bytes)
            body = ChunkReader(response.iter_content(chunk_size=1 << 20))
            self._load(self._guarded(verifier.verified(body), source))
            elapsed = time.monotonic() - started
            self._progress(source, figures["bytes_done"], total, elapsed)
        tag_image(self.api, self.image_id, self.reference)
        return {
            "image_id": self.image_id,
            "source": source,
            "bytes_received": figures["bytes_done"],
            "layers_received": len(verifier.layer_digests),
            "seconds": round(elapsed, 2),
        }

    def _request(self, peer: dict[str, str], held: set[str], source: str) -> requests.Response:
        try:
            response = requests.post(
                peer["address"] + protocol.PEER_FETCH_PATH,
                json={"image_id": self.image_id, "held_chains": sorted(held)},
                headers={"Authorization": f"Bearer {peer['ticket']}"},
                stream=True,
                timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S),
                verify=self.verify,
            )
        except requests.exceptions.RequestException as exc:
            raise PeerFailure("peer_unreachable", f"cannot reach peer {source}: {type(exc).__name__}") from None
        if response.status_code != 200:
            try:
                answer = response.json()
                reason, message = str(answer.get("reason") or answer["error"])[:40], str(answer["message"])[:300]
            except (ValueError, KeyError, TypeError, AttributeError):  # AttributeError: a JSON answer that is no object
                reason, message = "peer_failed", f"HTTP {response.status_code}"
            response.close()
            raise PeerFailure(
                reason if reason in ("ticket_refused", "ticket_expired", "image_not_found") else "peer_failed",
                f"peer {source} refused: {message}",
            )
        if response.headers.get("X-Faden-Image-Id") != self.image_id:
            response.close()
            raise PeerFailure("integrity_failed", f"peer {source} offers another image than {self.image_id}")
        return response

    def _check_space(self, total: int, source: str) -> None:
        require_space(
            self.api, total * SPACE_FACTOR, f"the image from {source} ({total} bytes, unpacked twice by docker load)"
        )

    def _guarded(self, chunks: Iterator[bytes], source: str) -> Iterator[bytes]:
        """The verified archive, cut (by raising) on a check that fails, a broken stream, or
        a stop; the exception is kept, as the HTTP client may report it otherwise."""
        try:
            for chunk in chunks:
                if self.should_stop():
                    raise Stopped()
                yield chunk
        except IntegrityError as exc:
            self.cut = PeerFailure("integrity_failed", f"peer {source}: {exc}")
            raise self.cut from None
        except (requests.exceptions.RequestException, OSError) as exc:
            self.cut = PeerFailure("peer_failed", f"the stream from peer {source} broke: {type(exc).__name__}")
            raise self.cut from None
        except Exception as exc:  # noqa: BLE001 - tarfile's errors of a malformed stream, Stopped
            self.cut = (
                exc
                if isinstance(exc, Stopped)
                else PeerFailure(
                    "integrity_failed",
                    f"peer {source}: not a valid image archive ({error_line(exc, named=True)})",
                )
            )
            raise self.cut from None

    def _load(self, archive: Iterator[bytes]) -> None:
        self.cut = None
        try:
            for line in self.api.load_image(archive):
                if isinstance(line, dict) and line.get("error"):
                    raise PeerFailure("peer_failed", f"the engine refused the archive: {str(line['error'])[:300]}")
        except PeerFailure:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever the client made of the cut
            if self.cut is not None:
                raise self.cut from None
            raise PeerFailure("peer_failed", f"docker load failed: {error_line(exc, 300, named=True)}") from None
        if self.cut is not None:
            raise self.cut
        try:
            self.api.inspect_image(self.image_id)
        except docker.errors.NotFound:
            raise PeerFailure("integrity_failed", f"the engine did not load {self.image_id}") from None

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
