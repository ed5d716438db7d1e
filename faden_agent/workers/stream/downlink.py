"""The downlink: read the backend's NDJSON stream and hand each command to the executor.

    loop: wait for the gate -> open the stream after the cursor -> for each line:
          keepalive: note the contact; command: hand off (REQ, retried until the executor
          acks) -> advance the durable cursor. On any failure: back off and reconnect.

The cursor (last acknowledged sequence number) lives in the outbox's meta table, so it
survives restarts; it advances only after the executor's ack, so a crash between
receiving and acking re-delivers the command, which the executor recognises by its id.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from faden_agent import protocol
from faden_agent.backend import BackendClient, BackendError
from faden_agent.config import ConfigError
from faden_agent.ipc import EnvelopeError, request
from faden_agent.workers.inventory.traffic.peers import write_peers
from faden_agent.workers.stream.link import Connection, Link, LinkThread, RejoinNeeded

log = logging.getLogger(__name__)

CURSOR_KEY = "downlink_after"
EPOCH_KEY = "downlink_epoch"  # the backend identity the cursor belongs to (docs/protocol.md, Epoch)
HANDOFF_TIMEOUT_S = 5.0  # the executor journals to disk before it acks: seconds, not minutes
HANDOFF_RETRY_S = 1.0


class Downlink(LinkThread):
    def __init__(self, link: Link):
        super().__init__("downlink", link)
        self.cursor = int(self.outbox.get_meta(CURSOR_KEY, "0") or 0)
        self.epoch = self.outbox.get_meta(EPOCH_KEY, "") or ""
        self.stale = 0  # commands at or below the cursor within one epoch: counted, logged
        self.connects = 0

    def run(self) -> None:
        while self.gate.wait():
            self.status.set_connection(Connection.CONNECTING)
            client = BackendClient(self.config, self.membership.credential)
            try:
                self.follow(client)
            except BackendError as exc:
                connection, delay = self.back_off(exc)
                if connection == Connection.CREDENTIAL_REJECTED and self.token_set():
                    raise RejoinNeeded(
                        f"the backend rejects the credential (HTTP {exc.status}) and a new "
                        "enrollment token is set: the stream worker restarts to enroll again"
                    ) from None
                self.status.set_connection(connection, f"{exc}; reconnecting in {delay:.1f}s")
                log.log(
                    logging.ERROR if connection == Connection.CREDENTIAL_REJECTED else logging.WARNING,
                    "downlink: %s; reconnecting in %.1fs",
                    exc,
                    delay,
                )
                self.stop.wait(delay)
            finally:
                client.close()

    def token_set(self) -> bool:
        """A token to re-enroll with (the variable, or the token file as it is now), other
        than the one this membership was bought with."""
        try:
            token = self.config.token()
        except ConfigError:
            return False
        return bool(token) and not self.membership.spent(token)

    def follow(self, client: BackendClient) -> None:
        stream = client.open_stream(self.cursor, self.config.stream_keepalive_sec)
        self.status.set_connection(Connection.CONNECTED)
        self.connects += 1
        self.status.note(reconnects=self.connects - 1)
        self.status.contact()
        self.backoff.reset()
        log.info("downlink connected (after seq %d)", self.cursor)
        for message in stream:
            if self.stop.is_set():
                stream.close()
                return
            self.status.contact()
            if message["type"] == "hello" and not self.same_epoch(message.get("epoch")):
                stream.close()
                return  # reconnect at once, from the reset cursor
            if message["type"] == "command":
                self.deliver(message)
            elif message["type"] == "peers":  # the cluster's other machines, for the traffic view
                write_peers(self.config.state_dir, message)
            # "keepalive" only proves the stream is alive; unknown types are skipped so a
            # newer backend can add some.

    def same_epoch(self, epoch: Any) -> bool:
        """Adopt the backend's epoch; False when it changed (the backend's command store was
        restored or replaced: its sequence numbers start over, so the cursor does too)."""
        if not isinstance(epoch, str) or not epoch or epoch == self.epoch:
            return True  # a backend without epochs: the cursor alone decides
        if not self.epoch:
            self.outbox.set_meta(EPOCH_KEY, epoch)  # the first epoch seen: the cursor is its own
            self.epoch = epoch
            return True
        log.warning(
            "downlink: the backend's epoch changed from %.80r to %.80r (its command store was restored or "
            "replaced); cursor reset from seq %d to 0, re-delivered commands are recognised by id",
            self.epoch,
            epoch,
            self.cursor,
        )
        self.outbox.set_meta(CURSOR_KEY, "0")  # before the epoch: a crash in between resets again, harmlessly
        self.outbox.set_meta(EPOCH_KEY, epoch)
        self.cursor, self.epoch = 0, epoch
        self.status.note(epoch_resets=self.status.snapshot().get("epoch_resets", 0) + 1)
        return False

    def deliver(self, message: dict[str, Any]) -> None:
        try:
            command = parse_command(message)
        except ValueError as exc:  # without a usable id and seq no terminal state can be reported
            log.error("downlink: skipped a malformed command (%s): %s", exc, protocol.quote(message))
            return
        if command["seq"] <= self.cursor:
            # Already acknowledged in this epoch: a backend replaying from an older cursor,
            # or one that went back in time without a new epoch. Never dropped in silence.
            self.stale += 1
            self.status.note(stale_commands=self.stale)
            log.warning(
                "downlink: command %.200r (seq %d) is at or below the cursor %d of epoch %.80r; not run "
                "again (%d such commands so far)",
                command["id"],
                command["seq"],
                self.cursor,
                self.epoch or "-",
                self.stale,
            )
            return
        if not self.hand_off(command):
            return  # stopping; the cursor stays, the command comes again next start
        self.cursor = command["seq"]
        self.outbox.set_meta(CURSOR_KEY, str(self.cursor))

    def hand_off(self, command: dict[str, Any]) -> bool:
        """Send the command to the executor until it acks; False only when stopping."""
        warned = False
        while not self.stop.is_set():
            try:
                reply = request(self.endpoints.executor, "command", command, timeout_s=HANDOFF_TIMEOUT_S)
            except EnvelopeError as exc:
                reply = None
                log.error("downlink: the executor's reply is malformed: %s", exc)
            if (
                reply is not None
                and reply.type == "ack"
                and isinstance(reply.body, dict)
                and reply.body.get("id") == command["id"]
            ):
                log.info(
                    "command %s (%s, seq %d) handed to the executor: accepted=%s duplicate=%s",
                    command["id"],
                    command["kind"],
                    command["seq"],
                    reply.body.get("accepted"),
                    reply.body.get("duplicate"),
                )
                return True
            if not warned:
                log.warning(
                    "downlink: the executor did not ack command %s within %.0fs; retrying",
                    command["id"],
                    HANDOFF_TIMEOUT_S,
                )
                warned = True
            self.stop.wait(HANDOFF_RETRY_S)
        return False


def parse_command(message: dict[str, Any]) -> dict[str, Any]:
    """The executor's hand-off body; ValueError (one line) when a required field is missing
    or mistyped (protocol.command_problem, which the executor asks too)."""
    problem = protocol.command_problem(message)
    if problem is not None:
        raise ValueError(problem)
    command_id, seq, kind, deadline = message["id"], message["seq"], message["kind"], message.get("deadline")
    command = {"id": command_id, "seq": seq, "kind": kind, "spec": message.get("spec"), "deadline": deadline}
    size = message.get("too_large")  # the reader's measure of a line over its cap (backend.DownlinkStream)
    if type(size) is not int:
        size = len(orjson.dumps(command))
    if size > protocol.MAX_COMMAND_BYTES:
        # Beyond the IPC budget: hand over only what identifies it; the executor acks it and
        # ends it `rejected` (too_large), so it is answered once and never retried.
        return {**command, "kind": kind[: protocol.MAX_ID_BYTES], "spec": None, "too_large": size}
    return command
