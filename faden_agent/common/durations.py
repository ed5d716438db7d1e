"""Durations, parsed once for every caller (settings, host requests, command specs): a finite
number of seconds above 0 and at most a bound (MAX_DURATION_S unless the caller's is smaller);
anything else is BadDuration, one line naming the value."""

from __future__ import annotations

import math
import re

MAX_DURATION_S = 366 * 86400.0  # no interval, wait or deadline the agent keeps is longer than a year
_TEXT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


class BadDuration(ValueError):
    pass


def seconds(value: object, what: str = "a duration", maximum: float = MAX_DURATION_S) -> float:
    """A number of seconds as it came (JSON, an argument): finite, > 0, <= maximum."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadDuration(f"{what} must be a number of seconds, not {_shown(value)}")
    if not math.isfinite(value) or not 0 < value <= maximum:
        raise BadDuration(f"{what} must be more than 0 and at most {maximum:g} seconds, not {_shown(value)}")
    return float(value)


def parse_duration(text: str, what: str = "a duration", maximum: float = MAX_DURATION_S) -> float:
    """'90', '90s', '5m', '1.5h', '2d', '500ms' -> seconds, bounded as seconds() bounds them."""
    match = _TEXT.fullmatch(text or "") if isinstance(text, str) else None
    if match is None:
        raise BadDuration(f"{what}: {_shown(text)} is no duration: use e.g. 90s, 5m or 1h")
    return seconds(float(match.group(1)) * _UNITS[match.group(2)], what, maximum)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
