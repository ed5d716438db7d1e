"""URL redaction, the spent token leaving the env file, and the process hardening of `run`."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from faden_agent.common.redact import RedactingFormatter, redact_text, redact_url
from faden_agent.config import load_config
from faden_agent.service.envfile import forget_token, read_env, write_env


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


def test_the_spent_token_leaves_the_env_file_and_a_new_one_stays(tmp_path):
    path = tmp_path / "agent.env"
    write_env(path, {"FADEN_NODE_AGENT_ENROLLMENT_TOKEN": "new", "FADEN_NODE_AGENT_LOG_LEVEL": "debug"})
    assert forget_token(path, "spent") is False  # someone put a new token there: kept
    assert forget_token(path, "new") is True
    assert read_env(path) == {"FADEN_NODE_AGENT_LOG_LEVEL": "debug"}
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_harden_process_drops_the_token_and_core_dumps():
    script = (
        "import ctypes, subprocess\n"
        "from faden_agent.cli.hardening import harden_process\n"
        "harden_process()\n"
        "print(open('/proc/self/environ', 'rb').read().count(b'tok-secret-9'))\n"
        "print(subprocess.run(['env'], capture_output=True, text=True).stdout.count('tok-secret-9'))\n"
        "print(ctypes.CDLL('libc.so.6').prctl(3, 0, 0, 0, 0))\n"  # PR_GET_DUMPABLE
        "import resource; print(resource.getrlimit(resource.RLIMIT_CORE))\n"
    )
    env = {**os.environ, "FADEN_NODE_AGENT_ENROLLMENT_TOKEN": "tok-secret-9"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:4] == ["0", "0", "0", "(0, 0)"], out
