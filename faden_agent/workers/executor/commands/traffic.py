"""The traffic.* kinds (docs/commands.md): active probes between peer machines."""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING, Any

from faden_agent.common.failure import Cancelled, Stopped
from faden_agent.protocol import quote
from faden_agent.transfers.probe import LIMITS
from faden_agent.transfers.tickets import PROBE_GRANT, Ticket, TicketBox
from faden_agent.workers.executor import specs
from faden_agent.workers.executor.commands.frame import Commands
from faden_agent.workers.executor.commands.image import peers as image_peers
from faden_agent.workers.executor.commands.image import sha256_hex
from faden_agent.workers.executor.kinds import COMMON, CommandKind, register
from faden_agent.workers.executor.peer_start import ask_to_serve
from faden_agent.workers.executor.scheduler import Job
from faden_agent.workers.executor.specs import Check, SpecError

if TYPE_CHECKING:
    from faden_agent.transfers.probe_client import Bounds

log = logging.getLogger(__name__)

MAX_PEERS = 64
MAX_DURATION_S = LIMITS.seconds  # per phase; what a peer grants at most
DEFAULT_DURATION_S = 2.0
MAX_BYTES = LIMITS.bytes  # per direction and peer
DEFAULT_MAX_BYTES = 256 << 20
MAX_ROUND_TRIPS = 1000
DEFAULT_ROUND_TRIPS = 100
MAX_TTL_S = 3600.0


# --- spec checks


def number_in(low: float, high: float, whole: bool = False) -> Check:
    """A number in (low, high] (a whole one when `whole`); booleans, strings, NaN refused."""

    def check(key: str, value: Any) -> float | int:
        kind_ok = isinstance(value, int) if whole else isinstance(value, (int, float))
        if isinstance(value, bool) or not kind_ok or not (math.isfinite(value) and low < value <= high):
            shown = "a whole number" if whole else "a number"
            raise SpecError(f"{quote(key)} must be {shown} above {low:g} and at most {high:g}, got {quote(value)}")
        return value if whole else float(value)

    return check


def objects(key: str, value: Any, keys: tuple[str, ...], what: str) -> list[dict[str, Any]]:
    """A list of 1..MAX_PEERS objects with exactly `keys` each (values unchecked). Refusals
    name keys and types, never quote a value (tickets are secrets)."""
    if not isinstance(value, list) or not 0 < len(value) <= MAX_PEERS:
        shown = f"{len(value)} {what}" if isinstance(value, list) else type(value).__name__
        raise SpecError(f"{quote(key)} must be a list of 1..{MAX_PEERS} {what}, got {shown}")
    for entry in value:
        if not isinstance(entry, dict) or set(entry) != set(keys):
            shown = f"keys {quote(sorted(map(str, entry)))}" if isinstance(entry, dict) else type(entry).__name__
            raise SpecError(f"each of {quote(key)} must be {{{', '.join(keys)}}}, got {shown}")
    return value


def probe_peers(key: str, value: Any) -> list[dict[str, str]]:
    """[{"machine", "address": "http(s)://host:port", "ticket"}], 1..MAX_PEERS, machines distinct."""
    checked = []
    for peer in objects(key, value, ("machine", "address", "ticket"), "peers"):
        machine = peer["machine"]
        if not isinstance(machine, str) or not 0 < len(machine) <= 200 or not machine.isprintable():
            raise SpecError(
                f"{quote(key)} machine must be a printable string of 1..200 characters, got {quote(machine)}"
            )
        reached = image_peers(key, [{"address": peer["address"], "ticket": peer["ticket"]}])[0]
        checked.append({"machine": machine, **reached})
    if len({p["machine"] for p in checked}) != len(checked):
        raise SpecError(f"{quote(key)} names a machine twice")
    return checked


def probe_tickets(key: str, value: Any) -> list[dict[str, str]]:
    """[{"ticket_sha256", "receiver"}], 1..MAX_PEERS."""
    return [
        {
            "ticket_sha256": sha256_hex(f"{key}.ticket_sha256", entry["ticket_sha256"]),
            "receiver": specs.string(f"{key}.receiver", entry["receiver"]),
        }
        for entry in objects(key, value, ("ticket_sha256", "receiver"), "tickets")
    ]


# --- handlers


def traffic_serve(commands: Commands, job: Job) -> dict[str, Any]:
    spec = job.spec
    expires_at = time.time() + spec["ttl_s"]
    box = TicketBox(commands.config.runtime_dir)
    for entry in spec["tickets"]:
        box.add(entry["ticket_sha256"], Ticket(PROBE_GRANT, entry["receiver"], expires_at))
    ask_to_serve(commands.config)  # the peer worker starts on demand: listening before we answer
    receivers = sorted({entry["receiver"] for entry in spec["tickets"]})
    return {
        "receivers": receivers,
        "expires_at": round(expires_at, 3),
        "message": f"{len(spec['tickets'])} probe tickets for {', '.join(receivers)[:300]} "
        f"for {spec['ttl_s']:g} s (one use each)",
    }


def traffic_probe(commands: Commands, job: Job) -> dict[str, Any]:
    spec = job.spec
    from faden_agent.transfers.probe_client import Bounds  # loaded by the first probe

    bounds = Bounds(spec["duration_s"], spec["max_bytes"], spec["round_trips"])
    entries = []
    for done, peer in enumerate(spec["peers"], start=1):
        commands.check(job)
        entries.append(probe_one(peer, bounds, commands.config.tls_verify(), job))
        commands.progress(job, phase="probe", machine=peer["machine"], peers_done=done, peers_total=len(spec["peers"]))
    failed = [f"{e['machine']}: {e['reason']}" for e in entries if e["reason"]]
    return {
        "peers": entries,
        "bounds": {"duration_s": bounds.duration_s, "max_bytes": bounds.max_bytes, "round_trips": bounds.round_trips},
        "message": f"probed {len(entries)} peers: {len(entries) - len(failed)} measured"
        + (f", {len(failed)} failed ({'; '.join(failed)[:500]})" if failed else ""),
    }


def probe_one(peer: dict[str, str], bounds: Bounds, verify: bool | str, job: Job) -> dict[str, Any]:
    """One peer's entry: its figures, or its reason and what was measured before it."""
    entry: dict[str, Any] = {
        "machine": peer["machine"],
        "address": peer["address"],
        "at": round(time.time(), 3),
        "reason": None,
        "message": None,
    }
    from faden_agent.transfers.probe_client import Probe, ProbeFailed

    attempt = Probe(peer["address"], peer["ticket"], bounds, verify, job.should_stop, job.on_abort)
    try:
        attempt.run()
    except ProbeFailed as failure:
        log.warning("probe of %s: %s", peer["machine"], failure.message)
        entry.update(reason=failure.reason, message=failure.message)
    except Stopped:
        raise Cancelled() from None
    return {**entry, **attempt.figures}


register(
    CommandKind(
        "traffic.serve",
        traffic_serve,
        {"tickets": probe_tickets},
        {"ttl_s": (number_in(0, MAX_TTL_S), 300.0)},
    )
)
register(
    CommandKind(
        "traffic.probe",
        traffic_probe,
        {"peers": probe_peers},
        {
            "duration_s": (number_in(0, MAX_DURATION_S), DEFAULT_DURATION_S),
            "max_bytes": (number_in(0, MAX_BYTES, whole=True), DEFAULT_MAX_BYTES),
            "round_trips": (number_in(0, MAX_ROUND_TRIPS, whole=True), DEFAULT_ROUND_TRIPS),
            **COMMON,
        },
        deadline_s=600.0,
        queue_key=lambda spec: "traffic:probe",  # one probe at a time: two would share the link
        cancellable=True,
    )
)
