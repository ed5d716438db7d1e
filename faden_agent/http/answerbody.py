"""An HTTP answer's body (requests, stream=True) read within a size and a deadline: whoever
answers (backend, proxy, registry, relay, Loki) can send an endless, huge or drip-fed body,
and that fails the one request with a reason, never grows memory or holds a thread."""

from __future__ import annotations

import time
from typing import Any

import orjson
import requests
import urllib3

READ_BYTES = 64 << 10  # urllib3 >= 2.6 inflates at most this much a read: a gzip bomb stays small


class AnswerUnread(Exception):
    """The body could not be read whole: over the size bound, too slow, or cut."""


class AnswerTooLarge(AnswerUnread):
    pass


def read_body(response: requests.Response, max_bytes: int, deadline_s: float) -> bytes:
    """The whole (decoded) body, or AnswerUnread; the answer is closed when it fails."""
    body = bytearray()
    give_up = time.monotonic() + deadline_s
    try:
        # read1: what has arrived, so a body dripping a byte at a time still meets the deadline
        while chunk := response.raw.read1(READ_BYTES, decode_content=True):
            body += chunk
            if len(body) > max_bytes:
                raise AnswerTooLarge(f"an answer over {max_bytes} bytes")
            if time.monotonic() > give_up:
                raise AnswerUnread(f"an answer still arriving after {deadline_s:g} s")
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        response.close()
        raise AnswerUnread(f"the answer broke: {type(exc).__name__}") from None
    except AnswerUnread:
        response.close()
        raise
    return bytes(body)


def read_json_object(response: requests.Response, max_bytes: int, deadline_s: float) -> dict[str, Any]:
    """The body as a JSON object; AnswerUnread, or ValueError when it is not one."""
    answer = orjson.loads(read_body(response, max_bytes, deadline_s))
    if not isinstance(answer, dict):
        raise ValueError("the answer is no JSON object")
    return answer
