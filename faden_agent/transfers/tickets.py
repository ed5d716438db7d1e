"""One-time tickets for serving an image to one receiver."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import time
from pathlib import Path
from typing import NamedTuple

import orjson

from faden_agent.common.failure import Failure

TICKET_DIR = "peer-tickets"
SPENT_SUFFIX = ".spent"
# An expired ticket is kept this long, so a late receiver is told `ticket_expired`, not
# "unknown", and the clean-up never races the check.
EXPIRED_KEPT_S = 600.0
MAX_TICKET_BYTES = 4096  # a grant is an image id, an address and a time: well under 1 KiB


class TicketRefused(Failure):
    """A peer's ticket is not good for what it asks."""


# The grant of a ticket for one active probe session (transfers/probe.py), in the place
# of an image id: an image ticket cannot open a probe, nor a probe ticket fetch an image.
PROBE_GRANT = "traffic.probe"


class Ticket(NamedTuple):
    image_id: str  # what it grants: an image id, or PROBE_GRANT
    receiver: str | None  # the receiver's address; None: any
    expires_at: float  # wall clock


def ticket_hash(ticket: str) -> str:
    return hashlib.sha256(ticket.encode()).hexdigest()


class TicketBox:
    def __init__(self, runtime_dir: Path):
        self.path = Path(runtime_dir) / TICKET_DIR

    def add(self, hash_hex: str, ticket: Ticket) -> None:
        self.path.mkdir(mode=0o700, exist_ok=True)
        partial = self.path / f".{hash_hex}.new"
        partial.write_bytes(
            orjson.dumps({"image_id": ticket.image_id, "receiver": ticket.receiver, "expires_at": ticket.expires_at})
        )
        os.replace(partial, self.path / hash_hex)

    def take(self, presented: str, image_id: str, receiver: str) -> Ticket:
        """The ticket's grant, spent now; TicketRefused when it is unknown, spent, expired,
        or for another image or receiver."""
        return check_grant(self.spend(presented, receiver), image_id)

    def spend(self, presented: str, receiver: str) -> Ticket:
        """The ticket's grant, spent now, whatever it grants (the peer port knows the ticket
        from the headers, the image only from the body); TicketRefused as take()."""
        hash_hex = ticket_hash(presented)
        live, spent = self.path / hash_hex, self.path / (hash_hex + SPENT_SUFFIX)
        try:
            os.rename(live, spent)
        except FileNotFoundError:
            raise TicketRefused("ticket_refused", "unknown or already used ticket") from None
        try:
            grant = _grant(_read_ticket(spent))
        finally:
            spent.unlink(missing_ok=True)
        if grant.expires_at < time.time():
            raise TicketRefused("ticket_expired", "the ticket has expired")
        if grant.receiver and grant.receiver != receiver:
            raise TicketRefused("ticket_refused", f"the ticket is for another receiver than {receiver[:100]}")
        return grant

    def expire(self, kept_s: float = EXPIRED_KEPT_S) -> int:
        """Remove tickets expired more than kept_s ago; how many. A file no ticket can be read
        from (cut short by a crash or a full disk), a partial write never renamed into place
        and a spent ticket a dead worker left go once they are older than kept_s: no grant of
        theirs can be honoured."""
        removed = 0
        now = time.time()
        for entry in self.path.iterdir() if self.path.is_dir() else ():
            try:
                if entry.name.endswith(SPENT_SUFFIX):
                    # take() removes it at once, unless the worker died in between. The rename
                    # that spent it set its ctime: a ticket being taken right now is never old.
                    expired = entry.lstat().st_ctime < now - kept_s
                elif entry.name.startswith("."):
                    expired = entry.lstat().st_mtime < now - kept_s
                else:
                    try:
                        expired = _grant(_read_ticket(entry)).expires_at < now - kept_s
                    except TicketRefused:
                        expired = entry.lstat().st_mtime < now - kept_s
                if expired:
                    entry.unlink()
                    removed += 1
            except OSError:
                continue
        return removed


def check_grant(grant: Ticket, image_id: str) -> Ticket:
    if grant.image_id != image_id:
        raise TicketRefused("ticket_refused", "the ticket is for another image (or a probe)")
    return grant


def _read_ticket(path: Path) -> bytes:
    """A ticket file's bytes; TicketRefused for what no ticket the executor writes is (a
    symlink, a FIFO that would block the reader, anything but a small regular file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise
        raise TicketRefused("ticket_refused", f"the ticket's file cannot be read ({exc.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise TicketRefused("ticket_refused", "the ticket's file is corrupt: not a regular file")
        data = os.read(fd, MAX_TICKET_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_TICKET_BYTES:
        raise TicketRefused("ticket_refused", "the ticket's file is corrupt: too large")
    return data


def _grant(data: bytes) -> Ticket:
    """The grant a ticket file holds; TicketRefused naming what is wrong when the file is
    corrupt (cut short by a crash, a full disk, another writer): spent all the same."""
    try:
        fields = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TicketRefused("ticket_refused", f"the ticket's file is corrupt: not JSON ({exc})"[:200]) from None
    if (
        not isinstance(fields, dict)
        or not isinstance(fields.get("image_id"), str)
        or not isinstance(fields.get("receiver"), (str, type(None)))
        or type(fields.get("expires_at")) not in (int, float)
    ):
        raise TicketRefused("ticket_refused", f"the ticket's file is corrupt: {data[:80]!r}")
    return Ticket(fields["image_id"], fields["receiver"], fields["expires_at"])
