"""The IPC envelope's round trip and rejections, and the runtime directory: created 0700,
tightened, refused when someone else owns it."""

from __future__ import annotations

import os

import pytest

from faden_agent.disk.files import PrivateDirError
from faden_agent.ipc import EnvelopeError, decode, encode, ensure_runtime_dir


def test_envelope_round_trip_and_rejections():
    msg = decode(encode("ps", {"a": 1}))
    assert (msg.type, msg.body) == ("ps", {"a": 1})
    for frame in (b"not json", b"[]", b'{"v": 2, "type": "x"}', b'{"v": 1}', b'{"v": 1, "type": ""}'):
        with pytest.raises(EnvelopeError):
            decode(frame)


def test_runtime_dir_created_0700_and_tightened(tmp_path):
    path = ensure_runtime_dir(tmp_path / "a" / "run")
    assert path.stat().st_mode & 0o777 == 0o700
    os.chmod(path, 0o755)
    ensure_runtime_dir(path)
    assert path.stat().st_mode & 0o777 == 0o700


def test_runtime_dir_owned_by_someone_else_is_refused(tmp_path):
    path = tmp_path / "theirs"
    path.mkdir()
    os.chown(path, 65534, 65534)
    with pytest.raises(PrivateDirError, match="owned by uid 65534"):
        ensure_runtime_dir(path)
