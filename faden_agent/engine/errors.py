"""What a request to the Docker engine fails with; str() is one line fit for a status field."""

from __future__ import annotations


class EngineError(Exception):
    """Any failure talking to the Docker engine."""


class EngineUnreachable(EngineError):
    """No answer: the socket refused, vanished or timed out (the transport's error is the cause)."""

    def __init__(self, message: str, timed_out: bool = False):
        super().__init__(message)
        self.timed_out = timed_out


class ApiError(EngineError):
    """The engine answered with an error status; `explanation` is its own words."""

    def __init__(self, status_code: int, explanation: str):
        super().__init__(f"{status_code}: {explanation}" if explanation else str(status_code))
        self.status_code = status_code
        self.explanation = explanation


class NotFound(ApiError):
    """404: no such container or image."""


class EngineVersionError(EngineError):
    """The engine's /version names no API version this agent can use."""


class EngineTooOld(EngineVersionError):
    """The engine speaks no API version this agent can use."""
