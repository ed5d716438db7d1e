"""RFC 3339 timestamps as Docker writes them (each container log line's prefix) and Loki
quotes them (its refusals): text -> epoch nanoseconds."""

from __future__ import annotations

import re
from datetime import datetime

_RFC3339 = re.compile(rb"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


def parse_rfc3339_ns(text: bytes) -> int | None:
    """Docker's RFC 3339 timestamp (nanoseconds, trailing zeros trimmed) -> epoch ns."""
    global _last_utc_second
    second, seconds = _last_utc_second
    if text[:19] == second and text[-1:] == b"Z":  # the fast path: most lines share the last one's second
        if len(text) == 20:
            return seconds * 1_000_000_000
        fraction = text[20:-1]
        if text[19:20] == b"." and len(fraction) <= 9 and fraction.isdigit():
            return seconds * 1_000_000_000 + int(fraction.ljust(9, b"0"))
    match = _RFC3339.match(text)
    if match is None:
        return None
    zone = "+00:00" if match[3] == b"Z" else match[3].decode()
    try:
        seconds = int(datetime.fromisoformat(match[1].decode() + zone).timestamp())
    except ValueError:  # digits in the right places, yet no date (month 13, zone +99:00)
        return None
    if match[3] == b"Z":
        _last_utc_second = (match[1], seconds)  # one tuple, replaced whole: safe for the follower threads
    return seconds * 1_000_000_000 + int((match[2] or b"").ljust(9, b"0"))


# Docker writes "YYYY-MM-DDTHH:MM:SS[.1 to 9 digits]Z": the date part of the last such stamp
# parsed the slow way, and its epoch seconds. A line of the same second needs no datetime.
_last_utc_second: tuple[bytes, int] = (b"-", 0)
