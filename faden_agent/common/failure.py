"""Failure: the one base of every error that ends in a reported reason (docs/protocol.md);
`reason` is a machine word from the protocol's reasons, `message` one line for people.
Beside it the two ends that are no failure: Stopped (a helper's should_stop() said so) and
Cancelled (the command was cancelled or abandoned at its deadline).
"""

from __future__ import annotations


class Failure(Exception):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


class Stopped(Exception):
    """should_stop() said so (a cancel, a deadline): the work is cut, nothing is kept."""


class Cancelled(Exception):
    """The command was cancelled (command.cancel) or abandoned at its deadline."""
