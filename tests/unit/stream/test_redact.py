"""URL credentials redacted wherever a URL is shown: in messages, log lines and tracebacks
(common/redact.py)."""

from __future__ import annotations

import logging
import sys

from faden_agent.common.redact import RedactingFormatter, redact_text, redact_url
from faden_agent.config import load_config


def test_url_credentials_are_redacted_wherever_a_url_is_shown():
    assert redact_url("https://user:key@logs.example:3100/x") == "https://<redacted>@logs.example:3100/x"
    assert redact_url("http://logs.example") == "http://logs.example"
    assert redact_text("push to https://u:k@l/p failed; mail a@b") == "push to https://<redacted>@l/p failed; mail a@b"
    config = load_config(
        {"FADEN_NODE_AGENT_LOKI_URL": "https://user:key@logs.example", "FADEN_NODE_AGENT_ENROLLMENT_TOKEN": "tok-123"}
    )
    assert config.loki_url == "https://user:key@logs.example"  # still used to push
    for text in (repr(config), str(config.redacted())):
        assert "key@" not in text and "tok-123" not in text


def test_log_lines_and_tracebacks_are_redacted():
    formatter = RedactingFormatter("%(message)s")
    try:
        raise ValueError("cannot reach https://user:key@logs.example")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "push to %s", ("http://a:b@h",), sys.exc_info())
    line = formatter.format(record)
    assert "key@" not in line and "a:b@" not in line and line.count("<redacted>@") >= 2
