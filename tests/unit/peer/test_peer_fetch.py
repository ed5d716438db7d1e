"""The fetching side's checks before a transfer (transfers/fetch.py): the disk-space check on a
real small tmpfs, and the fetch path to a peer or a relay."""

from __future__ import annotations

import subprocess

import pytest

from faden_agent import protocol
from faden_agent.transfers.fetch import NoSpace, PeerFailure, check_space


class EngineInfo:
    def __init__(self, root: str):
        self.root = root

    def info(self) -> dict:
        return {"DockerRootDir": self.root}


def test_no_space_names_the_bytes_needed_and_free(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], capture_output=True, check=False
    ).returncode:
        pytest.skip("needs root to mount a tmpfs")
    try:
        with pytest.raises(NoSpace, match=r"needs about \d+ bytes on .*small, \d+ are free"):
            check_space(EngineInfo(str(mount)), 100 << 20)
        check_space(EngineInfo(str(tmp_path)), 1 << 20)  # room enough elsewhere: no refusal
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_the_fetch_path_keeps_a_relay_address_path_and_refuses_what_cannot_be_sent():
    from faden_agent.transfers.fetch import fetch_path

    assert fetch_path("http://198.18.0.11:7480") == protocol.PEER_FETCH_PATH
    assert fetch_path("http://198.18.0.1:8000/v1/relay/abc/") == "/v1/relay/abc" + protocol.PEER_FETCH_PATH
    for bad in ("http://198.18.0.1:8000/a b", "http://198.18.0.1:8000/a\r\nX-Evil: 1"):
        with pytest.raises(PeerFailure, match="cannot be sent"):
            fetch_path(bad)
