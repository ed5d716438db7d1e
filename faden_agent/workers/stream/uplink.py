"""Uplink: the stream worker's thread that drains the durable outbox to the backend
in batches (BackendClient.post_reports, POST /api/agent/v1/uplink).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import orjson

from faden_agent import protocol
from faden_agent.backend.client import BackendClient, BackendError, ProtocolError, RequestRejected
from faden_agent.node import backend_accepts
from faden_agent.protocol.link import LinkState
from faden_agent.workers.stream.link import Link, LinkThread

log = logging.getLogger(__name__)

BATCH_SIZE = 500
SAFETY_S = 60.0  # a lost poke (none is known) would delay a record at most this long
TRIM_EVERY_S = 60.0


class Uplink(LinkThread):
    def __init__(self, link: Link):
        super().__init__("uplink", link)
        self.wakeup = threading.Event()
        self.wakeup.set()  # drain at start: records may wait from before
        self._next_trim = 0.0

    def poke(self) -> None:
        self.wakeup.set()

    def run(self) -> None:
        client = BackendClient(self.config, self.membership.credential)
        try:
            while not self.stop_event.is_set():
                self.wakeup.wait(SAFETY_S)
                self.wakeup.clear()
                self.trim_if_due()
                if not self.gate.wait():
                    break
                try:
                    if not self.drain(client):
                        self.poke()  # a hold came between batches: on once the gate opens
                except BackendError as exc:
                    connection, delay = self.back_off(exc)
                    # A rejected credential or maintenance is the downlink's to report in status.
                    log.log(
                        logging.WARNING if connection == LinkState.BACKOFF else logging.DEBUG,
                        "uplink: %s; retrying in %.1fs (%d records wait on disk)",
                        exc,
                        delay,
                        self.outbox.count(),
                    )
                    self.stop_event.wait(delay)
                    self.poke()  # the retry is due now, poked or not
        finally:
            client.close()

    def drain(self, client: BackendClient) -> bool:
        """Send until the outbox is empty (True), or the worker stops or the gate closes."""
        while not self.stop_event.is_set() and self.gate.remaining() <= 0:
            batch = bounded_batch(self.outbox.pending(BATCH_SIZE))
            if not batch:
                return True
            self.send(client, batch)
        return self.stop_event.is_set()

    def send(self, client: BackendClient, batch: list[dict[str, Any]]) -> None:
        """Send and ack one batch; a 413 splits it in halves, down to one record, which is
        then sent as a stub: one record the backend will not take never blocks the rest."""
        try:
            acked, rejected = client.post_reports(batch, gzip=backend_accepts.gzip_accepted(self.config.state_dir))
        except RequestRejected as exc:
            if exc.status != 413:
                raise
            if len(batch) > 1:
                log.warning("uplink: the backend refused a batch of %d records as too large; splitting it", len(batch))
                half = len(batch) // 2
                self.send(client, batch[:half])
                self.send(client, batch[half:])
                return
            record = batch[0]
            if is_stub(record):
                raise  # even the stub is refused: a backend problem, retried with backoff
            log.error(
                "uplink: the backend refused record %s (%s) as too large; sending a stub instead",
                record.get("id"),
                record.get("kind"),
            )
            self.send(client, [truncated(record, len(orjson.dumps(record)))])
            return
        self.acknowledge(batch, acked, rejected)

    def acknowledge(self, batch: list[dict[str, Any]], acked: list[str], rejected: list[str]) -> None:
        if rejected:
            # Malformed records would be resent forever and block the queue: drop them, loudly.
            log.error(
                "uplink: the backend rejected %d malformed records (ids %s); dropped", len(rejected), rejected[:5]
            )
        # Only this batch's ids: a backend acking ids it was not sent must not drop pending records.
        done = (set(acked) | set(rejected)) & {r["id"] for r in batch}
        if not done:
            raise ProtocolError("the backend acknowledged none of the batch")
        self.outbox.ack(done)
        self.link_status.contact()
        self.backoff.reset()

    def trim_if_due(self) -> None:
        now = time.monotonic()
        if now < self._next_trim:
            return
        self._next_trim = now + TRIM_EVERY_S
        dropped = self.outbox.trim()
        if dropped:
            log.error("uplink: the outbox exceeded its bound; dropped the %d oldest records", dropped)
            self.outbox.put(
                protocol.EVENT,
                {
                    "type": "agent.outbox_overflow",
                    "dropped": dropped,
                    "message": f"{dropped} oldest unsent records dropped",
                },
            )


def bounded_batch(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The oldest records that fit MAX_UPLINK_BATCH_BYTES (at least one), each record over
    MAX_RECORD_BYTES replaced by its stub."""
    batch: list[dict[str, Any]] = []
    total = 0
    for record in records:
        size = len(orjson.dumps(record))
        if size > protocol.MAX_RECORD_BYTES:
            log.error(
                "uplink: record %s (%s) of %d bytes exceeds %d; sending a stub instead",
                record.get("id"),
                record.get("kind"),
                size,
                protocol.MAX_RECORD_BYTES,
            )
            record = truncated(record, size)
            size = len(orjson.dumps(record))
        if batch and total + size > protocol.MAX_UPLINK_BATCH_BYTES:
            break
        batch.append(record)
        total += size
    return batch


def is_stub(record: dict[str, Any]) -> bool:
    return isinstance(record.get("data"), dict) and record["data"].get("truncated") is True


STUB_FIELDS = 32  # the first few short fields (command_id, state, reason, type, ...) stay


def truncated(record: dict[str, Any], size: int) -> dict[str, Any]:
    """The record's stub: same id and kind, its short scalar fields, `truncated: true`."""
    data = record.get("data")
    if not isinstance(data, dict):
        data = {}
    kept: dict[str, Any] = {}
    for key, value in data.items():
        if len(kept) >= STUB_FIELDS:
            break
        if (
            value is None
            or isinstance(value, (bool, int, float))
            or (isinstance(value, str) and len(value) <= protocol.QUOTE_BYTES)
        ):
            kept[key] = value
    return {**record, "data": {**kept, "truncated": True, "original_bytes": size}}
