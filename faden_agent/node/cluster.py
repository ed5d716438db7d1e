"""The cluster's peer machines, as the backend last told this agent (docs/protocol.md,
downlink message `peers`): kept in a small file in the state directory, so the traffic
sampler (inventory worker) reads what the downlink (stream worker) wrote, across restarts
of either.
"""

from __future__ import annotations

import ipaddress
import logging
from pathlib import Path
from typing import Any

import orjson

from faden_agent.disk.files import replace_file_if_changed

log = logging.getLogger(__name__)

FILE_NAME = "peers.json"
MAX_PEERS = 1024


def peers_path(state_dir: Path) -> Path:
    return Path(state_dir) / FILE_NAME


def parse_peers(message: dict[str, Any]) -> dict[str, Any] | None:
    """The file's content from a downlink `peers` message; None when it is malformed."""
    cluster, peers = message.get("cluster"), message.get("peers")
    if cluster is not None and not isinstance(cluster, str):
        return None
    if not isinstance(peers, list) or len(peers) > MAX_PEERS:
        return None
    clean = []
    for peer in peers:
        if not isinstance(peer, dict) or not isinstance(peer.get("address"), str):
            return None
        try:
            address = str(ipaddress.ip_address(peer["address"]))
        except ValueError:
            return None
        node_id = peer.get("node_id")
        clean.append({"node_id": node_id if isinstance(node_id, str) else None, "address": address})
    return {"cluster": cluster, "peers": clean}


def write_peers(state_dir: Path, message: dict[str, Any]) -> bool:
    """Keep a downlink `peers` message; False (and one log line) when it is malformed."""
    content = parse_peers(message)
    if content is None:
        log.error("downlink: skipped a malformed peers message: %.200r", message)
        return False
    try:
        replace_file_if_changed(peers_path(state_dir), orjson.dumps(content))
    except OSError as exc:  # e.g. disk full: the backend sends peers again after every hello
        log.error("downlink: could not keep the peers message: %s", exc)
        return False
    return True


class PeerFile:
    """Reads the file again only when it changed (stat per sample, no parse)."""

    def __init__(self, state_dir: Path):
        self.path = peers_path(state_dir)
        self._stamp: tuple[int, int] | None = None
        self.cluster: str | None = None
        self.by_address: dict[str, str | None] = {}  # address -> node id

    def refresh(self) -> None:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._stamp, self.cluster, self.by_address = None, None, {}
            return
        stamp = (stat.st_mtime_ns, stat.st_ino)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            content = parse_peers(orjson.loads(self.path.read_bytes())) or {}
        except (OSError, orjson.JSONDecodeError) as exc:
            log.warning("%s unreadable (%s); no peers until the backend sends them again", self.path, exc)
            content = {}
        self.cluster = content.get("cluster")
        self.by_address = {p["address"]: p["node_id"] for p in content.get("peers", [])}
