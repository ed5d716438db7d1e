"""The peers file (node/cluster.py): the backend's peers message checked, kept and read back, and
one that cannot be written never raises in the downlink's thread."""

from __future__ import annotations

from pathlib import Path

from faden_agent.node.cluster import PeerFile, parse_peers, write_peers


def test_peers_message_checked_kept_and_read_back(tmp_path: Path):
    assert parse_peers({"cluster": "c", "peers": [{"address": "not-an-ip"}]}) is None
    assert parse_peers({"cluster": "c", "peers": "x"}) is None
    assert not write_peers(tmp_path, {"cluster": 5, "peers": []})
    peers = PeerFile(tmp_path)
    peers.refresh()
    assert peers.by_address == {}
    assert write_peers(tmp_path, {"type": "peers", "cluster": "c", "peers": [{"node_id": "n2", "address": "10.0.0.2"}]})
    peers.refresh()
    assert (peers.cluster, peers.by_address) == ("c", {"10.0.0.2": "n2"})


def test_a_peers_message_that_cannot_be_written_does_not_raise(tmp_path: Path):
    """The downlink thread writes it: an OSError (disk full) must not end that critical thread."""
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    assert not write_peers(
        not_a_dir, {"type": "peers", "cluster": "c", "peers": [{"node_id": "n2", "address": "10.0.0.2"}]}
    )
