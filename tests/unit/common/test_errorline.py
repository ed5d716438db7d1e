"""errorline.error_line: the one way an exception becomes a line of a message."""

from __future__ import annotations

import socket

import requests

from faden_agent.common.errorline import error_line


def test_the_first_non_blank_line_bounded_or_the_type_name():
    assert error_line(ValueError("\n  bad value  \nsecond line")) == "bad value"
    assert error_line(ValueError("x" * 1000)) == "x" * 200
    assert error_line(ValueError("x" * 1000), 300) == "x" * 300
    assert error_line(KeyError()) == "KeyError"
    assert (
        error_line(OSError(28, "No space left on device"), named=True) == "OSError: [Errno 28] No space left on device"
    )
    assert error_line(RuntimeError(""), named=True) == "RuntimeError"
    assert len(error_line(ValueError("y" * 1000), named=True)) == 200


def test_root_reads_the_innermost_cause_of_a_real_refused_connection():
    """requests wraps it three deep; the operator is told 'Connection refused'."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))  # held, never listening: refused, and no one else's
        port = probe.getsockname()[1]
        try:
            requests.get(f"http://127.0.0.1:{port}/", timeout=5)
        except requests.ConnectionError as exc:
            assert "Max retries" in str(exc)  # the outer text says little
            assert error_line(exc, root=True) == "Connection refused"
        else:
            raise AssertionError("a closed port answered")


def test_root_survives_a_cycle_and_a_chain_without_text():
    outer = RuntimeError("outer")
    inner = ValueError("")
    outer.__context__, inner.__context__ = inner, outer  # a cycle
    assert error_line(outer, root=True) == "outer"
