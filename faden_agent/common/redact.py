"""Credentials in URLs (`https://user:key@logs.example`) never leave the process in the clear.

redact_url() for a URL shown on purpose (`config`, a status field); redact_text() for any
text that may contain one (a log line, an error); RedactingFormatter applies redact_text to
every log line of the agent (RedactingFormatter, common/logsetup.py).
"""

from __future__ import annotations

import logging
import re
from urllib.parse import urlsplit, urlunsplit

REDACTED = "<redacted>"
# scheme://userinfo@ : the userinfo may hold anything but '/', '@' and blanks.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s\"'<>]+@")


def redact_url(url: str | None) -> str | None:
    """The URL with its user and password replaced, or as is when it has none."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{REDACTED}@{host}"))


def redact_text(text: str) -> str:
    return _USERINFO.sub(rf"\g<scheme>{REDACTED}@", text) if "@" in text else text


class RedactingFormatter(logging.Formatter):
    """The whole formatted line (traceback included) with URL credentials replaced."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))
