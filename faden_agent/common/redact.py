"""Secrets never leave the process in the clear. redact_url() for a URL shown on purpose
(`config`, a status field); redact_text() for any text that may hold a URL's credentials (every
log line, through RedactingFormatter); redact_secrets() also for cloud keys, tokens and
`password=...` (text a container wrote); terminal_safe() drops escapes and control characters.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import urlsplit, urlunsplit

REDACTED = "<redacted>"
# scheme://userinfo@ : the userinfo may hold anything but '/', '@' and blanks.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s\"'<>]+@")
# What only a dying container's last words meet (redact_secrets, terminal_safe) is kept as
# text: `re` compiles each at its first use and caches it, not at every start (round 19).
# Secrets by their own form (each provider's documented prefix), replaced whole.
_TOKENS = (
    r"\b(?:"
    r"(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}"  # AWS access key ids
    r"|hf_[A-Za-z0-9]{30,}|api_org_[A-Za-z0-9]{30,}"  # Hugging Face hub tokens
    r"|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,}"  # GitHub
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
    r"|sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"  # OpenAI, Anthropic
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    r"|AIza[0-9A-Za-z_-]{35}"  # Google API keys
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JSON web tokens
    r")(?![A-Za-z0-9])"
)
# A secret by its name: the name stays, its value goes ("AWS_SECRET_ACCESS_KEY=...", "password: ...").
_NAMED = (
    r"(?i)\b(?P<name>[a-z0-9_.-]*(?:password|passwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key"
    r"|credentials?|authorization))(?P<sep>[\"']?\s*[:=]\s*)(?:bearer\s+|basic\s+|token\s+)?"
    r"(?P<value>\"[^\"]*\"|'[^']*'|[^\s,;]+)"
)
_BEARER = r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{12,}"
_PRIVATE_KEY = r"(?s)-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"
# Terminal escapes (CSI, OSC, and the others: ESC, intermediates, a final), then any other control character but a
# tab: C0, DEL, C1, and the Unicode controls that reorder what a terminal shows.
_ESCAPES = r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -/]*[0-~]?|\x9b[0-?]*[ -/]*[@-~]"
_CONTROLS = "[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"


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


def redact_secrets(text: str) -> str:
    """redact_text, and every secret known by its form or its name replaced by REDACTED."""
    text = re.sub(_PRIVATE_KEY, REDACTED, redact_text(text))
    text = re.sub(_TOKENS, REDACTED, text)
    text = re.sub(_BEARER, lambda m: f"{m.group(1)} {REDACTED}", text)
    return re.sub(_NAMED, lambda m: f"{m.group('name')}{m.group('sep')}{REDACTED}", text)


def terminal_safe(text: str) -> str:
    """The text without terminal escapes and control characters (a tab stays)."""
    return re.sub(_CONTROLS, "", re.sub(_ESCAPES, "", text))


class RedactingFormatter(logging.Formatter):
    """The whole formatted line (traceback included) with URL credentials replaced."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))
