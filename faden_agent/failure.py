"""Failure: the one base of every error that ends in a reported reason (docs/protocol.md).

`reason` is a machine word from the protocol's reasons, `message` one line for people;
str(failure) is the message. Subclasses add only what their callers need.
"""

from __future__ import annotations


class Failure(Exception):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message
