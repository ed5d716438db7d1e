"""The downlink: read the backend's NDJSON stream and hand each command to the executor.

The cursor (the outbox's cursor store) is an optimisation, the command id the truth: every
command is handed over whatever its seq, and the executor answers an id it has seen from its
journal. The cursor resets when `hello` shows a new epoch or a backend behind it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import orjson

from faden_agent import protocol
from faden_agent.backend.client import BackendClient, BackendError
from faden_agent.common import testhooks
from faden_agent.config import ConfigError
from faden_agent.ipc import EnvelopeError, request
from faden_agent.node import backend_accepts
from faden_agent.node.cluster import write_peers
from faden_agent.protocol.link import LinkState
from faden_agent.workers.stream.expected import expectations
from faden_agent.workers.stream.link import Link, LinkThread, RejoinNeeded
from faden_agent.workers.stream.rotation import adopt_credential

if TYPE_CHECKING:
    from faden_agent.protocol.status import CommandAck, CommandHandOff

log = logging.getLogger(__name__)

CURSOR_KEY = "downlink_after"
EPOCH_KEY = "downlink_epoch"  # the backend identity the cursor belongs to (docs/protocol.md, Epoch)
HANDOFF_TIMEOUT_S = 5.0  # the executor journals to disk before it acks: seconds, not minutes
HANDOFF_RETRY_S = 1.0


class Downlink(LinkThread):
    def __init__(self, link: Link):
        super().__init__("downlink", link)
        self.cursor = stored_cursor(self.outbox.get_meta(CURSOR_KEY, "0"))
        self.epoch = self.outbox.get_meta(EPOCH_KEY, "") or ""
        self.stale = 0  # re-delivered commands at or below the cursor: counted, logged
        self.below_cursor_run = 0  # new ids at or below the cursor (a restored backend): run
        self.connects = 0

    def run(self) -> None:
        while self.gate.wait():
            self.link_status.set_connection(LinkState.CONNECTING)
            client = BackendClient(self.config, self.membership.credential)
            try:
                self.follow(client)
            except BackendError as exc:
                connection, delay = self.back_off(exc)
                if connection == LinkState.CREDENTIAL_REJECTED and self.token_set():
                    raise RejoinNeeded(
                        f"the backend rejects the credential (HTTP {exc.status}) and a new "
                        "enrollment token is set: the stream worker restarts to enroll again"
                    ) from None
                self.link_status.set_connection(connection, f"{exc}; reconnecting in {delay:.1f}s")
                log.log(
                    logging.ERROR if connection == LinkState.CREDENTIAL_REJECTED else logging.WARNING,
                    "downlink: %s; reconnecting in %.1fs",
                    exc,
                    delay,
                )
                self.stop_event.wait(delay)
            finally:
                client.close()

    def token_set(self) -> bool:
        """A token to re-enroll with (the variable, or the token file as it is now), other
        than the one this membership was bought with."""
        try:
            token = self.config.token()
        except ConfigError:
            return False
        return token is not None and bool(token) and not self.membership.spent(token)

    def follow(self, client: BackendClient) -> None:
        stream = client.open_stream(self.cursor, self.config.stream_keepalive_sec)
        testhooks.pause("stream_opened", self.config.runtime_dir)
        self.link_status.set_connection(LinkState.CONNECTED)
        self.connects += 1
        self.link_status.note(reconnects=self.connects - 1)
        self.link_status.contact()
        self.backoff.reset()
        log.info("downlink connected (after seq %d)", self.cursor)
        for message in stream:
            if self.stop_event.is_set():
                stream.close()
                return
            self.link_status.contact()
            if message["type"] == "hello":
                self.link_status.note(**expectations(message.get("expected")))
                backend_accepts.heard_hello(self.config.state_dir, message.get("accepts"))
            if message["type"] == "hello" and not (
                self.same_epoch(message.get("epoch")) and self.backend_not_behind(message.get("high_seq"))
            ):
                stream.close()
                return  # reconnect at once, from the reset cursor
            if message["type"] == "command":
                self.deliver(message)
            elif message["type"] == "credential":  # raises once the new one is on disk
                adopt_credential(self.config, self.membership, message)
            elif message["type"] == "peers":  # the cluster's other machines, for the traffic view
                write_peers(self.config.state_dir, message)
            elif message["type"] == "inventory.full":  # the backend fell behind: the next record is full
                backend_accepts.full_requested(self.config.state_dir)
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
        self.reset_cursor()  # before the epoch: a crash in between resets again, harmlessly
        self.outbox.set_meta(EPOCH_KEY, epoch)
        self.epoch = epoch
        return False

    def backend_not_behind(self, high_seq: Any) -> bool:
        """False when the backend's highest issued seq is below the cursor: it was restored
        from a backup (every file of it, so it cannot tell) and issues used numbers again.
        Reset like a new epoch: to 0, not to its high, which may hold commands issued since."""
        if type(high_seq) is not int or high_seq < 0 or high_seq >= self.cursor:
            return True  # a backend that does not say, or one at or ahead of the cursor
        log.warning(
            "downlink: the backend's highest issued seq %d is below the cursor %d (it was restored from an "
            "older copy); cursor reset to 0, re-delivered commands are recognised by id",
            high_seq,
            self.cursor,
        )
        self.reset_cursor()
        return False

    def reset_cursor(self) -> None:
        """Back to 0, durably; the stream is reopened from there (commands recognised by id)."""
        self.outbox.set_meta(CURSOR_KEY, "0")
        self.cursor = 0
        self.link_status.note(epoch_resets=self.link_status.snapshot().get("epoch_resets", 0) + 1)

    def deliver(self, message: dict[str, Any]) -> None:
        try:
            command = parse_command(message)
        except ValueError as exc:  # without a usable id and seq no terminal state can be reported
            log.error("downlink: skipped a malformed command (%s): %s", exc, protocol.quote(message))
            return
        reply = self.hand_off(command)
        if reply is None:
            return  # stopping; the cursor stays, the command comes again next start
        if command["seq"] > self.cursor:
            self.cursor = command["seq"]
            self.outbox.set_meta(CURSOR_KEY, str(self.cursor))
        elif reply.get("duplicate"):
            # A backend replaying from an older cursor: answered from the journal, not run.
            self.stale += 1
            self.link_status.note(stale_commands=self.stale)
            log.warning(
                "downlink: command %.200r (seq %d, at or below the cursor %d) came again; answered from the "
                "journal, not run again (%d such commands so far)",
                command["id"],
                command["seq"],
                self.cursor,
                self.stale,
            )
        else:
            # A backend that went back in time without saying so: the id is new, so it runs.
            self.below_cursor_run += 1
            self.link_status.note(below_cursor_run=self.below_cursor_run)
            log.warning(
                "downlink: command %.200r has seq %d, at or below the cursor %d of epoch %.80r, but a new id: "
                "run (the cursor stays)",
                command["id"],
                command["seq"],
                self.cursor,
                self.epoch or "-",
            )

    def hand_off(self, command: CommandHandOff) -> CommandAck | None:
        """Send the command to the executor until it acks: the ack (what the caller reads of
        it); None only when stopping."""
        warned = False
        while not self.stop_event.is_set():
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
                accepted, duplicate = bool(reply.body.get("accepted")), bool(reply.body.get("duplicate"))
                return {"id": command["id"], "accepted": accepted, "duplicate": duplicate}
            if not warned:
                log.warning(
                    "downlink: the executor did not ack command %s within %.0fs; retrying",
                    command["id"],
                    HANDOFF_TIMEOUT_S,
                )
                warned = True
            self.stop_event.wait(HANDOFF_RETRY_S)
        return None


def stored_cursor(value: str | None) -> int:
    """The stored cursor; 0 (commands come again, recognised by id) when it is not a number."""
    try:
        cursor = int(value or 0)
    except ValueError:
        log.warning("downlink: the stored cursor %.40r is not a number; starting from 0", value)
        return 0
    return max(cursor, 0)


def parse_command(message: dict[str, Any]) -> CommandHandOff:
    """The executor's hand-off body; ValueError (one line) when a required field is missing
    or mistyped (protocol.command_problem, which the executor asks too)."""
    problem = protocol.command_problem(message)
    if problem is not None:
        raise ValueError(problem)
    command_id, seq, kind, deadline = message["id"], message["seq"], message["kind"], message.get("deadline")
    command: CommandHandOff = {
        "id": command_id,
        "seq": seq,
        "kind": kind,
        "spec": message.get("spec"),
        "deadline": deadline,
    }
    size = message.get("too_large")  # the reader's measure of a line over its cap (backend.DownlinkStream)
    if type(size) is not int:
        size = len(orjson.dumps(command))
    if size > protocol.MAX_COMMAND_BYTES:
        # Beyond the IPC budget: hand over only what identifies it; the executor acks it and
        # ends it `rejected` (too_large), so it is answered once and never retried.
        return {**command, "kind": kind[: protocol.MAX_ID_BYTES], "spec": None, "too_large": size}
    return command
