"""Peer tickets (transfers/tickets.py): spent by exactly one use, expired ones refused and
forgotten, a corrupt or odd ticket file a one-line refusal."""

from __future__ import annotations

import os
import threading
import time

import pytest

from faden_agent.transfers.tickets import EXPIRED_KEPT_S, SPENT_SUFFIX, Ticket, TicketBox, TicketRefused, ticket_hash


def test_a_ticket_is_spent_by_exactly_one_of_many_concurrent_uses(tmp_path):
    box = TicketBox(tmp_path)
    box.add(ticket_hash("t" * 32), Ticket("sha256:" + "a" * 64, "198.18.0.12", time.time() + 60))
    assert "t" * 32 not in "".join(p.read_text() + p.name for p in box.path.iterdir())  # only its hash is kept
    wins, refusals = [], []

    def use() -> None:
        try:
            wins.append(box.take("t" * 32, "sha256:" + "a" * 64, "198.18.0.12"))
        except TicketRefused as refused:
            refusals.append(refused.reason)

    threads = [threading.Thread(target=use) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(wins) == 1 and refusals == ["ticket_refused"] * 19
    assert not list(box.path.iterdir())


def test_expired_tickets_are_refused_and_forgotten(tmp_path):
    box = TicketBox(tmp_path)
    box.add(ticket_hash("e" * 32), Ticket("sha256:" + "a" * 64, None, time.time() - 1))
    with pytest.raises(TicketRefused) as refused:
        box.take("e" * 32, "sha256:" + "a" * 64, "198.18.0.12")
    assert refused.value.reason == "ticket_expired"
    box.add(ticket_hash("f" * 32), Ticket("sha256:" + "a" * 64, None, time.time() - 1))
    assert box.expire() == 0  # just expired: kept, so a late receiver hears `ticket_expired`
    assert box.expire(kept_s=0) == 1 and not list(box.path.iterdir())


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b'{"image_id": "sha256:',
        b"[1, 2]",
        b'{"image_id": 7, "receiver": null, "expires_at": 1e12}',
        b'{"image_id": "x", "receiver": null, "expires_at": "never"}',
        b'{"image_id": "x", "extra": 1}',
        b"\xff" * 300,
    ],
)
def test_a_corrupt_ticket_file_is_a_refusal_in_one_line_and_spent(tmp_path, content):
    """A cut or garbled file is a refusal with one line, not JSONDecodeError/TypeError out of
    take (the peer server's handler thread would end without an answer to the receiver)."""
    box = TicketBox(tmp_path)
    box.add(ticket_hash("c" * 32), Ticket("sha256:" + "a" * 64, None, time.time() + 60))
    (box.path / ticket_hash("c" * 32)).write_bytes(content)
    with pytest.raises(TicketRefused) as refused:
        box.take("c" * 32, "sha256:" + "a" * 64, "198.18.0.12")
    assert refused.value.reason == "ticket_refused" and "corrupt" in refused.value.message
    assert "\n" not in refused.value.message and len(refused.value.message) <= 200
    assert not list(box.path.iterdir())  # spent: a second try is 'unknown'


def test_expire_removes_old_corrupt_tickets_and_partial_writes(tmp_path):
    """expire removes, once old, a file it cannot read as a ticket and a partial `.new` write
    a crash left: neither stays in the runtime directory for good."""
    box = TicketBox(tmp_path)
    box.add(ticket_hash("g" * 32), Ticket("sha256:" + "a" * 64, None, time.time() + 3600))
    live = box.path / ticket_hash("g" * 32)
    corrupt = box.path / ticket_hash("h" * 32)
    partial = box.path / f".{ticket_hash('i' * 32)}.new"
    corrupt.write_bytes(b'{"image_id": "sha256:')
    partial.write_bytes(b'{"image_id"')
    assert box.expire() == 0  # young: kept like an expired ticket would be
    old = time.time() - EXPIRED_KEPT_S - 5
    for path in (live, corrupt, partial):
        os.utime(path, (old, old))
    assert box.expire() == 2
    assert list(box.path.iterdir()) == [live]  # a valid ticket goes by its grant, not its age
    # A spent ticket a worker died before removing: it counts from its spending (the rename).
    spent = live.with_name(live.name + SPENT_SUFFIX)
    live.rename(spent)
    assert box.expire() == 0 and spent.exists()
    assert box.expire(kept_s=-60) == 1 and not list(box.path.iterdir())


@pytest.mark.parametrize("kind", ["fifo", "symlink", "huge"])
def test_a_ticket_that_is_no_small_regular_file_is_refused_without_blocking(tmp_path, kind):
    """A FIFO would block the reader (the peer worker's tick, or a request's thread) for
    good, a symlink would read another file, a huge file would be read whole: each is a
    one-line refusal, and expire clears it once old."""
    box = TicketBox(tmp_path)
    box.add(ticket_hash("k" * 32), Ticket("sha256:" + "a" * 64, None, time.time() + 60))
    path = box.path / ticket_hash("k" * 32)
    path.unlink()
    target = tmp_path / "elsewhere"
    target.write_bytes(b'{"image_id": "sha256:' + b"a" * 64 + b'", "receiver": null, "expires_at": 1e12}')

    def plant():
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "symlink":
            path.symlink_to(target)
        else:
            path.write_bytes(b" " * (16 * 1024 * 1024))

    plant()
    old = time.time() - EXPIRED_KEPT_S - 5
    os.utime(path, (old, old), follow_symlinks=False)
    assert box.expire() == 1 and not list(box.path.iterdir())
    plant()
    with pytest.raises(TicketRefused) as refused:
        box.take("k" * 32, "sha256:" + "a" * 64, "198.18.0.12")
    assert refused.value.reason == "ticket_refused" and "\n" not in refused.value.message
    assert not list(box.path.iterdir())  # spent all the same
