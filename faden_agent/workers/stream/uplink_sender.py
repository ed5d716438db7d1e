"""The uplink sender: drain the durable outbox to the backend in batches.

    loop: wait for a poke (a producer wrote) or the poll interval -> wait for the gate ->
          send the oldest batch -> ack what the backend acknowledged -> repeat until empty.

Records leave the outbox only after the backend acknowledged their ids, so a backend
outage or a kill -9 loses nothing; a resend is harmless because the backend dedups ids.
"""

from __future__ import annotations

import logging
import threading
import time

from faden_agent import protocol
from faden_agent.backend import BackendClient, BackendError, ProtocolError
from faden_agent.workers.stream import link
from faden_agent.workers.stream.link import Link, LinkThread

log = logging.getLogger(__name__)

BATCH_SIZE = 500
POLL_S = 2.0  # a lost poke delays a record at most this long
TRIM_EVERY_S = 60.0


class UplinkSender(LinkThread):
    def __init__(self, link: Link):
        super().__init__("uplink", link)
        self.wakeup = threading.Event()
        self.sent = 0
        self._next_trim = 0.0

    def poke(self) -> None:
        self.wakeup.set()

    def run(self) -> None:
        client = BackendClient(self.config, self.state.credential)
        try:
            while not self.stop.is_set():
                self.wakeup.wait(POLL_S)
                self.wakeup.clear()
                self.trim_if_due()
                if not self.gate.wait():
                    break
                try:
                    self.drain(client)
                except BackendError as exc:
                    state, delay = self.back_off(exc)
                    # A rejected credential or maintenance is the downlink's to report in status.
                    log.log(logging.WARNING if state == link.BACKOFF else logging.DEBUG,
                            "uplink: %s; retrying in %.1fs (%d records wait on disk)", exc, delay, self.outbox.count())
                    self.stop.wait(delay)
        finally:
            client.close()

    def drain(self, client: BackendClient) -> None:
        while not self.stop.is_set() and self.gate.remaining() <= 0:
            batch = self.outbox.pending(BATCH_SIZE)
            if not batch:
                return
            acked, rejected = client.uplink(batch)
            if rejected:
                # Malformed records would be resent forever and block the queue: drop them, loudly.
                log.error("uplink: the backend rejected %d malformed records (ids %s); dropped", len(rejected), rejected[:5])
            done = set(acked) | set(rejected)
            if not done & {r["id"] for r in batch}:
                raise ProtocolError("the backend acknowledged none of the batch")
            self.outbox.ack(done)
            self.sent += len(acked)
            self.status.contact()
            self.backoff.reset()

    def trim_if_due(self) -> None:
        now = time.monotonic()
        if now < self._next_trim:
            return
        self._next_trim = now + TRIM_EVERY_S
        dropped = self.outbox.trim()
        if dropped:
            log.error("uplink: the outbox exceeded its bound; dropped the %d oldest records", dropped)
            self.outbox.put(protocol.EVENT, {"type": "agent.outbox_overflow", "dropped": dropped,
                                             "message": f"{dropped} oldest unsent records dropped"})
