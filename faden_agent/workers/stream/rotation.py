"""Credential rotation, backend-driven over the downlink (docs/protocol.md, Credential rotation).

A `credential` message carries the node's next credential: it is written over the state
file (atomic, 0600, fsync'd) before anything uses it, then the stream worker restarts to load
it; the backend keeps the old one valid until a request arrives with the new one.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from faden_agent.common import testhooks
from faden_agent.config import Config
from faden_agent.node.membership import Membership, rotate_credential
from faden_agent.workers.threads import RestartRequested

log = logging.getLogger(__name__)

CREDENTIAL_RE = re.compile(r"[A-Za-z0-9_.~+/=-]{16,512}")  # header-safe, bounded


class CredentialRotated(RestartRequested):
    """The state file holds the new credential: the stream worker restarts to use it."""


def adopt_credential(config: Config, membership: Membership, message: dict[str, Any]) -> None:
    """Write the message's credential to the state file and raise CredentialRotated; a
    malformed one is logged (never quoted) and ignored, the old credential stays."""
    credential = message.get("credential")
    if not isinstance(credential, str) or not CREDENTIAL_RE.fullmatch(credential):
        log.error("downlink: ignored a credential message whose credential is malformed (16-512 token characters)")
        return
    if credential == membership.credential:
        return  # sent again before the backend saw it used: already ours
    testhooks.pause("credential_received", config.runtime_dir)
    testhooks.kill_once_between("credential_received", "credential_written", config.runtime_dir)
    try:
        rotate_credential(config.state_path, membership, credential)
    except OSError as exc:  # the old one stays on disk and valid; the next stream gets a fresh one
        log.error("cannot write the rotated credential to %s (%s); keeping the old one", config.state_path, exc)
        return
    testhooks.pause("credential_written", config.runtime_dir)
    testhooks.kill_once_between("credential_written", "credential_used", config.runtime_dir)
    log.warning("credential rotated by the backend: state file %s rewritten; reconnecting with it", config.state_path)
    raise CredentialRotated("the backend rotated the credential: the stream worker restarts to use the new one")
