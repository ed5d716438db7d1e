"""Enrollment: load the state file, or enroll once with the one-time token and write it."""

from __future__ import annotations

import logging
import os
import platform
import threading

from faden_agent import __version__, protocol
from faden_agent.backend.client import BackendClient, BackendError, CredentialRejected
from faden_agent.common.backoff import Backoff
from faden_agent.config import Config, ConfigError, env_name
from faden_agent.disk.diskfull import DISK, is_disk_full, retry_when_full
from faden_agent.ipc import Endpoints, EnvelopeError, request
from faden_agent.node.fingerprint import fingerprint
from faden_agent.node.linkstatus import LinkStatus
from faden_agent.node.membership import (
    ENROLLMENT_ATTEMPT_FILE,
    Membership,
    MembershipError,
    check_backend,
    enrollment_attempt_id,
    forget_enrollment_attempt,
    load_membership,
    new_membership,
    supersede_membership,
    write_membership,
)
from faden_agent.protocol.link import LinkState
from faden_agent.service.envfile import forget_token
from faden_agent.workers.stream.link import Gate, wait_after

log = logging.getLogger(__name__)
ADOPT_ASK_TIMEOUT_S = 5.0


def enrollment_facts(config: Config) -> dict[str, object]:
    """What the backend learns about this machine at enrollment (never the token): with its
    labels and its topology as sysfs shows it (NVLink cliques come with the first inventory)."""
    from faden_agent.node.topology import topology  # once per enrollment: not in an idle worker

    uname = platform.uname()
    return {
        "agent_id": config.agent_id,
        "host": config.host,
        "advertise_host": config.advertise_host,
        "advertise_scheme": config.advertise_scheme,
        "version": __version__,
        "protocol": protocol.PROTOCOL_VERSION,
        "capabilities": list(protocol.CAPABILITIES),
        "fingerprint": fingerprint(config.sysfs_root),
        "labels": dict(config.labels),
        "topology": topology(config.sysfs_root),
        "platform": {
            "system": uname.system,
            "release": uname.release,
            "machine": uname.machine,
            "hostname": uname.node,
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
        },
    }


class Enrollment:
    def __init__(self, config: Config, link_status: LinkStatus, gate: Gate, stop_event: threading.Event):
        self.config = config
        self.link_status = link_status
        self.gate = gate
        self.stop_event = stop_event
        self.backoff = Backoff(config.reconnect_min_sec, config.reconnect_max_sec)
        self._last_problem: str | None = None
        self._unwritten: tuple[Membership, Membership | None, str] | None = None  # enrolled, state file not yet written
        self._unforgotten: str | None = None  # a spent token a full disk kept in the env file

    def establish(self) -> Membership | None:
        """Block (in a thread) until this machine is a member; None when stopping."""
        while not self.stop_event.is_set():
            try:
                membership = self.attempt()
            except MembershipError as exc:
                self.problem(LinkState.STATE_ERROR, str(exc), self.config.reconnect_max_sec)
            except ConfigError as exc:  # an unreadable token file
                self.problem(LinkState.CONFIG_ERROR, str(exc), self.config.reconnect_max_sec)
            except BackendError as exc:
                connection, delay = wait_after(exc, self.backoff, self.config.reconnect_max_sec)
                advice = (
                    "; mint a new token and set it, then restart" if connection == LinkState.ENROLLMENT_REFUSED else ""
                )
                self.problem(connection, f"enrollment failed: {exc}{advice}", delay)
            else:
                if membership is not None:
                    return membership
                self.problem(
                    LinkState.NOT_ENROLLED,
                    f"not enrolled: set {env_name('enrollment_token')} or {env_name('enrollment_token_file')}",
                    self.config.reconnect_max_sec,
                )
        return None

    def attempt(self) -> Membership | None:
        path = self.config.state_path
        membership = load_membership(path)
        if membership is not None:
            check_backend(membership, self.config.backend_url, path)
            token = self.config.token() if self._token_set() else None
            if token and not membership.spent(token) and self.credential_rejected(membership):
                return self.enroll(token, replacing=membership)
            note = (
                ""
                if not token
                else (
                    " (the enrollment token set, already spent for this node, is ignored)"
                    if membership.spent(token)
                    else " (the enrollment token set is ignored: the credential is valid)"
                )
            )
            log.info("already a member of %s as node %s%s", membership.backend_url, membership.node_id, note)
            return membership
        token = self.config.token()
        if not token:
            return None
        return self.enroll(token)

    def credential_rejected(self, membership: Membership) -> bool:
        """Ask the backend (an empty uplink batch) whether it still knows this credential;
        other failures raise and are retried like any enrollment failure."""
        if not self.gate.wait():
            return False
        client = BackendClient(self.config, membership.credential)
        try:
            client.post_reports([])
        except CredentialRejected as exc:
            log.warning("%s; an enrollment token is set: enrolling again as agent %s", exc, membership.agent_id)
            return True
        finally:
            client.close()
        return False

    def enroll(self, token: str, replacing: Membership | None = None) -> Membership | None:
        """Spend the token; with `replacing`, re-enroll that member (same agent id, new credential)."""
        if not self.gate.wait():
            return None
        self.link_status.set_connection(LinkState.ENROLLING)
        agent_id = replacing.agent_id if replacing else self.config.agent_id
        # On disk before the token is spent; a full disk waits here, the token unspent.
        attempt = retry_when_full(
            lambda: enrollment_attempt_id(self.config.state_dir),
            self.config.state_dir / ENROLLMENT_ATTEMPT_FILE,
            self.stop_event,
        )
        client = BackendClient(self.config)
        try:
            reply = client.enroll(
                token, {**enrollment_facts(self.config), "agent_id": agent_id, "enrollment_id": attempt}
            )
        finally:
            client.close()
        membership = new_membership(self.config.backend_url, reply["node_id"], reply["credential"], agent_id, token)
        self._unwritten = (membership, replacing, token)
        try:
            self.write_membership_file()
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            # The token is spent: keep the credential in memory and run with it; the state
            # file is written as soon as there is space (write_membership_file, on this thread).
            DISK.full(self.config.state_path, str(exc))
            log.error(
                "enrolled as node %s, but the disk is full: cannot write the state file %s (%s); the credential "
                "is kept in memory and written as soon as there is space",
                membership.node_id,
                self.config.state_path,
                exc.strerror or exc,
            )
        if replacing is not None:
            self.report_containers_again()
        return membership

    def report_containers_again(self) -> None:
        """A new node at the backend: the executor reports the managed containers it adopted
        to it (an executor that starts now reports them anyway)."""
        try:
            reply = request(Endpoints(self.config.runtime_dir).executor, "adopt", {}, timeout_s=ADOPT_ASK_TIMEOUT_S)
        except EnvelopeError as exc:
            reply = None
            log.warning("the executor's answer to 'adopt' is malformed: %s", exc)
        if reply is None or reply.type != "ack":
            log.warning(
                "the executor did not take 'adopt' (%s); it reports its containers when it starts next",
                "no answer" if reply is None else reply.type,
            )

    def write_membership_file(self) -> None:
        """Write the membership file of an enrollment whose file is not on disk yet (a no-op once it is);
        until then the attempt id stays on disk, so a restart is answered with the same node."""
        if self._unwritten is None:
            return
        membership, replacing, token = self._unwritten
        path = self.config.state_path
        if replacing is not None and path.exists():
            aside = supersede_membership(path, membership)
            log.warning(
                "re-enrolled with %s: node %s is now node %s (agent %s); the rejected state file is kept as %s",
                membership.backend_url,
                replacing.node_id,
                membership.node_id,
                membership.agent_id,
                aside,
            )
        else:
            write_membership(path, membership)
        self._unwritten = None
        if DISK.written(path):
            log.warning("the state file %s is written: the disk has space again", path)
        forget_enrollment_attempt(self.config.state_dir)
        log.info("enrolled with %s as node %s; state written to %s", membership.backend_url, membership.node_id, path)
        self.forget_spent_token(token)

    def write_membership_file_when_possible(self) -> None:
        """Block (the membership thread) until the state file is written and the spent token
        is out of the env file, or stopping."""
        if self._unwritten is not None:
            retry_when_full(self.write_membership_file, self.config.state_path, self.stop_event)
        token, path = self._unforgotten, self.config.env_file
        if token is not None and path is not None:
            self._unforgotten = None
            if retry_when_full(lambda: forget_token(path, token), path, self.stop_event):
                log.info("the spent enrollment token was removed from %s", path)

    def forget_spent_token(self, token: str) -> None:
        path = self.config.env_file
        if path is None:
            return
        try:
            if forget_token(path, token):
                log.info("the spent enrollment token was removed from %s", path)
        except OSError as exc:
            if is_disk_full(exc):
                self._unforgotten = token  # removed once there is space (write_membership_file_when_possible)
            log.warning("cannot remove the spent enrollment token from %s: %s", path, exc.strerror or exc)

    def _token_set(self) -> bool:
        return bool(self.config.enrollment_token or self.config.enrollment_token_file)

    def problem(self, connection: LinkState, message: str, wait_s: float) -> None:
        if message != self._last_problem:  # one line per distinct problem, not one per retry
            log.error("%s", message)
            self._last_problem = message
        self.link_status.set_connection(connection, message)
        self.stop_event.wait(wait_s)
        self.gate.wait()
