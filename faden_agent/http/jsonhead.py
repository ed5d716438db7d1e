"""The leading members of a JSON object whose text is too long to parse whole."""

from __future__ import annotations

import codecs
import json
from typing import Any

import orjson

HEAD_BYTES = 4096  # what the stream reader keeps of a line it skips

_WHITESPACE = " \t\n\r"


# Python's json finds where each value ends; orjson reads it, as it reads whole lines (so
# NaN, a lone surrogate or an integer past 64 bits come out here as they would there).
_DECODER = json.JSONDecoder()


def leading_members(head: bytes) -> dict[str, Any]:
    """The top-level members of the JSON object `head` begins, as far as they are complete;
    {} when it is no object's beginning. Never raises."""
    try:  # a cut in the middle of a character is held back, a bad byte refuses the whole head
        text = codecs.getincrementaldecoder("utf-8")().decode(head[:HEAD_BYTES], final=False)
    except UnicodeDecodeError:
        return {}
    members: dict[str, Any] = {}
    at = _skip_space(text, 0)
    if not text.startswith("{", at):
        return members
    at += 1
    while True:
        try:
            key, at = _DECODER.raw_decode(text, _skip_space(text, at))
            at = _skip_space(text, at)
            if not isinstance(key, str) or not text.startswith(":", at):
                return members
            start = _skip_space(text, at + 1)
            _, at = _DECODER.raw_decode(text, start)
            value = orjson.loads(text[start:at])
        except (ValueError, RecursionError):  # cut off here, or no JSON (deep nesting: RecursionError)
            return members
        at = _skip_space(text, at)
        if not text.startswith((",", "}"), at):  # a number at the very end may be cut: 12 of 123
            return members
        members[key] = value
        if text.startswith("}", at):
            return members
        at += 1


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WHITESPACE:
        at += 1
    return at
