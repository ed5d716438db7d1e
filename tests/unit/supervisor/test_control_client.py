"""Control: the one client of the supervisor's control socket. A table comes back as a dict;
no supervisor, an error reply or a garbled frame is None (never an exception), within its
timeout."""

from __future__ import annotations

import threading
from typing import Any

from faden_agent.ipc import Endpoints, ensure_runtime_dir
from faden_agent.ipc import control as control_module
from faden_agent.ipc.control import Control
from tests.support.repserver import serve


def supervisor_like(runtime_dir, answers: list[Any]) -> threading.Thread:
    """A REP peer on the control socket that gives each answer in turn (raw bytes: a garbled frame)."""
    ensure_runtime_dir(runtime_dir)
    return serve(Endpoints(runtime_dir).control, len(answers), [], answers)


def test_ps_and_start_answered(tmp_path):
    table = {"supervisor": {"pid": 1}, "workers": [{"name": "stream", "state": "RUNNING"}]}
    peer = supervisor_like(tmp_path, [("ps", table), ("start", {"name": "peer", "state": "STARTING"})])
    client = Control(tmp_path, timeout_s=5.0)
    try:
        assert client.ps() == table
        assert client.start("peer") is True
    finally:
        client.close()
    peer.join(5.0)


def test_an_error_reply_or_a_garbled_frame_is_none(tmp_path):
    peer = supervisor_like(tmp_path, [("error", {"message": "unknown worker 'x'"}), b"\xff not an envelope"])
    client = Control(tmp_path, timeout_s=5.0)
    try:
        assert client.start("x") is False
        assert client.ps() is None
    finally:
        client.close()
    peer.join(5.0)


def test_no_supervisor_is_none(tmp_path):
    ensure_runtime_dir(tmp_path)
    assert control_module.ps(tmp_path, timeout_s=0.2) is None
