"""The backend link's states, in the order a healthy start passes them: the words the status
file, `faden-agent status`, `ps` and /metrics show (a StrEnum: they serialise as is)."""

from __future__ import annotations

from enum import StrEnum


class LinkState(StrEnum):
    STARTING = "starting"
    NOT_ENROLLED = "not_enrolled"
    ENROLLING = "enrolling"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    BACKOFF = "backoff"
    MAINTENANCE = "maintenance"
    CREDENTIAL_REJECTED = "credential_rejected"
    ENROLLMENT_REFUSED = "enrollment_refused"
    STATE_ERROR = "state_error"  # the membership (state) file cannot be used
    CONFIG_ERROR = "config_error"


LINK_STATES = tuple(state.value for state in LinkState)
READY_LINK_STATES = (LinkState.CONNECTED, LinkState.MAINTENANCE)  # maintenance: waiting out the backend's Retry-After
