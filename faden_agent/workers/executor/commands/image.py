"""The image.* kinds (docs/commands.md), images from peers included: pull (registry, then the
spec's peers), remove, prune (images no container uses and no `keep` entry names), serve
(inline: a one-time ticket for one receiver), fetch (from peers, one after the other,
transfers/fetch.py) and relay. pull_or_fetch is what container.run uses too.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any
from urllib.parse import urlsplit

from faden_agent import protocol
from faden_agent.common.errorline import error_line
from faden_agent.common.failure import Cancelled, Stopped
from faden_agent.disk.diskspace import NoSpace, SpaceWatch, require_space
from faden_agent.http.answerbody import AnswerUnread, read_json_object
from faden_agent.protocol import quote
from faden_agent.transfers.tickets import Ticket, TicketBox
from faden_agent.workers.executor import specs
from faden_agent.workers.executor.commands.frame import Commands
from faden_agent.workers.executor.docker_ops import CommandFailed, load_sdk, translated
from faden_agent.workers.executor.kinds import COMMON, CommandKind, register
from faden_agent.workers.executor.peer_start import ask_to_serve
from faden_agent.workers.executor.scheduler import Job
from faden_agent.workers.executor.specs import SpecError

log = logging.getLogger(__name__)

IMAGE_ID_RE = re.compile(r"sha256:[0-9a-f]{64}")
# Registry failures after which the peers named in the spec are tried.
FALLBACK_REASONS = ("image_not_found", "registry_unreachable", "registry_auth_failed", "docker_error")
RELAY_ANSWER_BYTES = 4 << 20  # the receiver's request: an image id and the layer chains it holds
RELAY_ANSWER_S = 30.0


# --- spec checks


def image_id(key: str, value: Any) -> str:
    if not isinstance(value, str) or not IMAGE_ID_RE.fullmatch(value):
        raise SpecError(f"{quote(key)} must be an image id sha256:<64 hex>, got {quote(value)}")
    return value


def sha256_hex(key: str, value: Any) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[0-9a-f]{64}", value):
        raise SpecError(f"{quote(key)} must be 64 lowercase hex digits (the ticket's sha256), got {quote(value)}")
    return value


def peers(key: str, value: Any) -> list[dict[str, str]]:
    """[{"address": "http(s)://host:port", "ticket": "..."}], 1..16 of them."""
    # Tickets are secrets: a refusal names keys and types, never quotes a peer.
    if not isinstance(value, list) or not 0 < len(value) <= 16:
        shown = f"{len(value)} peers" if isinstance(value, list) else type(value).__name__
        raise SpecError(f"{quote(key)} must be a list of 1..16 peers, got {shown}")
    checked = []
    for peer in value:
        if not isinstance(peer, dict) or set(peer) != {"address", "ticket"}:
            shown = f"keys {quote(sorted(map(str, peer)))}" if isinstance(peer, dict) else type(peer).__name__
            raise SpecError(f"each of {quote(key)} must be {{address, ticket}}, got {shown}")
        address, ticket = peer["address"], peer["ticket"]
        try:
            parts = urlsplit(address) if isinstance(address, str) else None
            port = parts.port if parts else None
        except ValueError:
            parts, port = None, None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or not port:
            raise SpecError(f"{quote(key)} address must be http(s)://host:port, got {quote(address)}")
        if not isinstance(ticket, str) or not 16 <= len(ticket) <= 512:
            raise SpecError(f"{quote(key)} ticket must be a string of 16..512 characters")
        checked.append({"address": address.rstrip("/"), "ticket": ticket})
    return checked


def keep_list(key: str, value: Any) -> list[str]:
    """Image references or ids never to remove: 0..256 non-empty strings."""
    if not isinstance(value, list) or len(value) > 256:
        shown = f"{len(value)} entries" if isinstance(value, list) else quote(value)
        raise SpecError(f"{quote(key)} must be a list of at most 256 image references, got {shown}")
    for entry in value:
        if not isinstance(entry, str) or not 0 < len(entry) <= 512:
            raise SpecError(f"each of {quote(key)} must be an image reference of 1..512 characters, got {quote(entry)}")
    return value


def size_bytes(key: str, value: Any) -> int:
    """The image's size as the backend knows it (the holder's inventory): the fetch's bound."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_IMAGE_BYTES:
        raise SpecError(f"{quote(key)} must be a whole number of bytes in 1..{MAX_IMAGE_BYTES}, got {quote(value)}")
    return value


MAX_IMAGE_BYTES = 1 << 44  # 16 TiB: above any image; a bound on the number, not a setting
# Peers to fetch the image from when the registry fails or lacks it.
PEER_OPTIONS = {"peers": (peers, None), "image_id": (image_id, None), "size_bytes": (size_bytes, None)}


# --- handlers


def image_pull(commands: Commands, job: Job) -> dict[str, Any]:
    result = pull_or_fetch(commands, job)
    return {
        **result,
        "message": f"pulled {job.spec['image']}" + (f" from peer {result['source']}" if "source" in result else ""),
    }


def pull_or_fetch(commands: Commands, job: Job) -> dict[str, Any]:
    """The registry first; the spec's peers when it fails or lacks the image."""
    try:
        return _pull(commands, job, job.spec["image"], job.spec.get("auth"))
    except CommandFailed as failure:
        if not job.spec.get("peers") or failure.reason not in FALLBACK_REASONS:
            raise
        log.info("command %s: %s; fetching from peers", job.id, failure.message)
        result = fetch_from_peers(commands, job, job.spec.get("image_id"), job.spec["image"], job.spec["peers"])
        return {**result, "registry_failure": failure.reason}


def _pull(commands: Commands, job: Job, image: str, auth: dict[str, str] | None) -> dict[str, Any]:
    slots = commands.scheduler.pull_slots
    # Before a slot is taken: a registry that drips its answers holds its own pull, not the slots
    check_pull_space(commands, job, image, auth)
    while not slots.acquire(timeout=0.2):
        commands.check(job)
    try:
        commands.progress(job, phase="pull", image=image, bytes_done=0, bytes_total=0, layers=0)
        return commands.ops.pull(
            image,
            auth,
            lambda figures: commands.progress(job, phase="pull", image=image, **figures),
            job.on_abort,
            job.should_stop,
        )
    finally:
        slots.release()


def check_pull_space(commands: Commands, job: Job, image: str, auth: dict[str, str] | None) -> None:
    """no_space before the pull when the layers the engine lacks (the registry's sizes, this
    platform's manifest) times PULL_SPACE_FACTOR do not fit its data root; the registry is
    asked within one deadline, given up when the job stops."""
    factor = commands.config.pull_space_factor
    if factor <= 0:
        return
    load_sdk()
    from faden_agent.workers.executor.pull_size import missing_bytes  # loaded by the first pull

    api = commands.ops.client.api
    with translated(f"checking the space for {image}"):
        missing = missing_bytes(api, image, auth, job.on_abort)
    commands.check(job)
    if not missing:
        return
    with translated(f"checking the space for {image}"):
        try:
            require_space(api, int(missing * factor), f"pulling {image} ({missing} bytes of layers to download)")
        except NoSpace as exc:
            raise no_space(exc) from None


def no_space(exc: NoSpace) -> CommandFailed:
    return CommandFailed("no_space", str(exc), needed_bytes=exc.needed_bytes, free_bytes=exc.free_bytes)


def image_remove(commands: Commands, job: Job) -> dict[str, Any]:
    result = commands.ops.remove_image(job.spec["image"], job.spec["force"])
    gone = "was already absent" if result["already_absent"] else "removed"
    return {**result, "message": f"image {job.spec['image']} {gone}"}


def image_prune(commands: Commands, job: Job) -> dict[str, Any]:
    # The images of commands queued or running now (a pull about to be run) stay too.
    wanted = [j.spec["image"] for j in commands.scheduler.jobs() if j is not job and j.spec.get("image")]
    load_sdk()
    from faden_agent.workers.executor.prune import prune  # loaded by the first prune

    with translated("pruning images"):
        result = prune(commands.ops.client.api, job.spec["keep"], lambda: commands.check(job), wanted)
    return {
        **result,
        "message": f"removed {len(result['removed'])} image(s), {result['bytes_freed']} bytes freed"
        + (f"; the engine refused {len(result['refused'])}" if result["refused"] else ""),
    }


def image_serve(commands: Commands, job: Job) -> dict[str, Any]:
    spec = job.spec
    expires_at = time.time() + spec["ttl_s"]
    TicketBox(commands.config.runtime_dir).add(
        spec["ticket_sha256"], Ticket(spec["image_id"], spec["receiver"], expires_at)
    )
    ask_to_serve(commands.config)  # the peer worker starts on demand: listening before we answer
    return {
        "image_id": spec["image_id"],
        "receiver": spec["receiver"],
        "expires_at": round(expires_at, 3),
        "message": f"serving {spec['image_id'][:19]} to {spec['receiver']} for {spec['ttl_s']:g} s (one use)",
    }


def image_fetch(commands: Commands, job: Job) -> dict[str, Any]:
    spec = job.spec
    result = fetch_from_peers(commands, job, spec["image_id"], spec.get("image"), spec["peers"])
    return {
        **result,
        "message": f"fetched {spec.get('image') or spec['image_id']} from {result.get('source', 'this machine')}",
    }


def fetch_from_peers(
    commands: Commands, job: Job, image_id: str | None, reference: str | None, sources: list[dict[str, str]]
) -> dict[str, Any]:
    """The image from the first peer that delivers it intact; CommandFailed naming every
    peer's failure otherwise (integrity_failed when any peer sent something else)."""
    if image_id is None:
        raise CommandFailed("invalid_spec", "peers were given without image_id (the image they must deliver)")
    # loaded by the first fetch: an idle executor holds no peer transfer code
    load_sdk()
    from faden_agent.transfers.fetch import PeerFailure, Transfer, check_space, local_image, tag_image
    from faden_agent.transfers.server import byte_limit

    api = commands.ops.client.api
    with translated("fetching an image from peers", image=reference):
        present = local_image(api, image_id)
        if present is not None:
            tag_image(api, present, reference)
            return {"image_id": image_id, "engine_image_id": present, "already_present": True}
        size = job.spec.get("size_bytes")
        limit = byte_limit(size) if size else commands.config.peer_fetch_max_bytes
        if size:
            try:
                check_space(api, size)
            except NoSpace as exc:
                raise no_space(exc) from None
        watch = SpaceWatch(api, f"fetching {image_id[:19]} from peers")  # a size told can still be wrong
        failures: list[PeerFailure] = []
        for peer in sources:
            commands.check(job)
            transfer = Transfer(
                api,
                image_id,
                reference,
                commands.config.tls_verify(),
                lambda figures: commands.progress(job, **figures),
                job.should_stop,
                limit,
                job.on_abort,
                watch.wrote,
            )
            try:
                delivered = transfer.run(peer)
            except NoSpace as exc:  # no other peer changes that
                raise no_space(exc) from None
            except PeerFailure as failure:  # whatever it was, the next peer is tried
                log.warning("command %s: %s", job.id, failure.message)
                failures.append(failure)
                continue
            except Stopped:
                raise Cancelled() from None
            commands.count_fetched(delivered["bytes_received"])
            return {**delivered, "failed_sources": [f.message for f in failures]}
    reasons = [f.reason for f in failures]
    reason = "integrity_failed" if "integrity_failed" in reasons else reasons[-1]
    raise CommandFailed(
        reason,
        "no peer delivered the image: " + "; ".join(f.message for f in failures)[:1500],
        sources=[{"reason": f.reason, "message": f.message} for f in failures],
    )


def image_relay(commands: Commands, job: Job) -> dict[str, Any]:
    """The holder's side of a relay through the backend (peers that cannot reach each other):
    wait for the receiver's request there, then upload the same stream the peer port sends.
    Runs in an executor scheduler thread (the peer worker only listens)."""
    load_sdk()
    import requests

    from faden_agent.transfers.server import holder_stream

    spec = job.spec
    auth = {"Authorization": f"Bearer {spec['token']}"}
    verify = commands.config.tls_verify()
    request: dict[str, Any] | None = None
    while request is None:
        commands.check(job)
        try:
            answer = requests.get(
                spec["url"] + protocol.RELAY_REQUEST, headers=auth, timeout=(10, 30), verify=verify, stream=True
            )
        except requests.exceptions.RequestException as exc:
            raise CommandFailed("peer_unreachable", f"cannot reach the relay: {type(exc).__name__}") from None
        with answer:
            if answer.status_code == 200:
                request = _relay_answer(answer)
            elif answer.status_code != 204:
                raise CommandFailed("peer_failed", f"the relay answered HTTP {answer.status_code}")
    if request.get("image_id") != spec["image_id"]:
        raise CommandFailed("ticket_refused", "the receiver asked the relay for another image")
    api = commands.ops.client.api
    with translated("serving an image through the relay"):
        headers, archive = holder_stream(api, spec["image_id"], {str(c) for c in request.get("held_chains") or ()})

    def checked() -> Any:
        for chunk in archive:
            if job.should_stop():
                raise Stopped()
            yield chunk

    try:
        done = requests.post(
            spec["url"] + protocol.RELAY_STREAM,
            data=checked(),
            headers={**auth, **headers},
            timeout=(10, 600),
            verify=verify,
            stream=True,
        )
    except Stopped:
        raise Cancelled() from None
    except requests.exceptions.RequestException as exc:
        raise CommandFailed("peer_failed", f"the relay upload broke: {type(exc).__name__}") from None
    with done:
        if done.status_code != 200:
            raise CommandFailed("peer_failed", f"the relay refused the stream: HTTP {done.status_code}")
        sent = _relay_answer(done).get("bytes")
    return {
        "image_id": spec["image_id"],
        "bytes_sent": sent,
        "message": f"relayed {spec['image_id'][:19]} through the backend",
    }


# --- the kinds


def by_image(spec: dict[str, Any]) -> str:
    return f"image:{spec['image']}"


def by_fetched_image(spec: dict[str, Any]) -> str:
    return f"image:{spec.get('image') or spec['image_id']}"


register(
    CommandKind(
        "image.pull",
        image_pull,
        {"image": specs.string},
        {"auth": (specs.auth, None), **PEER_OPTIONS, **COMMON},
        deadline_s=1800.0,
        queue_key=by_image,
        cancellable=True,
    )
)
register(
    CommandKind(
        "image.remove",
        image_remove,
        {"image": specs.string},
        {"force": (specs.boolean, False), **COMMON},
        queue_key=by_image,
    )
)
register(
    CommandKind(
        "image.prune",
        image_prune,
        {},
        {"keep": (keep_list, []), **COMMON},
        deadline_s=600.0,
        queue_key=lambda spec: "image:*prune",
        cancellable=True,
    )
)
register(
    CommandKind(
        "image.serve",
        image_serve,
        {"image_id": image_id, "ticket_sha256": sha256_hex, "receiver": specs.string},
        {"ttl_s": (specs.seconds, 600.0)},
    )
)
register(
    CommandKind(
        "image.fetch",
        image_fetch,
        {"image_id": image_id, "peers": peers},
        {"image": (specs.string, None), "size_bytes": (size_bytes, None), **COMMON},
        deadline_s=3600.0,
        queue_key=by_fetched_image,
        cancellable=True,
    )
)
register(
    CommandKind(
        "image.relay",
        image_relay,
        {"url": specs.string, "token": specs.string, "image_id": image_id},
        COMMON,
        deadline_s=3600.0,
        queue_key=by_fetched_image,
        cancellable=True,
    )
)


def _relay_answer(answer: Any) -> dict[str, Any]:
    """The relay's JSON object answer, bounded; CommandFailed naming what was wrong with it."""
    try:
        return read_json_object(answer, RELAY_ANSWER_BYTES, RELAY_ANSWER_S)
    except (AnswerUnread, ValueError) as exc:
        raise CommandFailed("peer_failed", f"the relay's answer is unusable: {error_line(exc, 200)}") from None
