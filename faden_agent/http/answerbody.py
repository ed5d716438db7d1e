"""An HTTP answer's body read within a size and a deadline: whoever answers (backend, proxy,
registry, relay, Loki) can send an endless, huge or drip-fed body, and that fails the one
request with a reason, never grows memory or holds a thread. For client.py's answers and
requests' (stream=True) alike."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from collections.abc import Callable

    import requests

READ_BYTES = 64 << 10  # what one read inflates at most: a gzip bomb stays small


class AnswerUnread(Exception):
    """The body could not be read whole: over the size bound, too slow, or cut."""


class AnswerTooLarge(AnswerUnread):
    pass


def read_within(
    read1: Callable[[int], bytes], max_bytes: int, deadline_s: float, broken: tuple[type[BaseException], ...]
) -> bytes:
    """The whole body read1 gives (what has arrived, b"" at the end), or AnswerUnread; an
    exception of `broken` is the answer cut."""
    body = bytearray()
    give_up = time.monotonic() + deadline_s
    try:
        # read1: what has arrived, so a body dripping a byte at a time still meets the deadline
        while chunk := read1(READ_BYTES):
            body += chunk
            if len(body) > max_bytes:
                raise AnswerTooLarge(f"an answer over {max_bytes} bytes")
            if time.monotonic() > give_up:
                raise AnswerUnread(f"an answer still arriving after {deadline_s:g} s")
    except broken as exc:
        raise AnswerUnread(f"the answer broke: {type(exc).__name__}") from None
    return bytes(body)


def read_body(response: requests.Response, max_bytes: int, deadline_s: float) -> bytes:
    """A requests answer's whole (decoded) body, or AnswerUnread; the answer is closed when it fails."""
    import urllib3

    try:
        return read_within(
            lambda size: response.raw.read1(size, decode_content=True),
            max_bytes,
            deadline_s,
            (urllib3.exceptions.HTTPError, OSError),
        )
    except AnswerUnread:
        response.close()
        raise


def read_json_object(response: requests.Response, max_bytes: int, deadline_s: float) -> dict[str, Any]:
    """The body as a JSON object; AnswerUnread, or ValueError when it is not one."""
    answer = orjson.loads(read_body(response, max_bytes, deadline_s))
    if not isinstance(answer, dict):
        raise ValueError("the answer is no JSON object")
    return answer
