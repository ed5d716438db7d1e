"""The reference backend's cluster store and admin table: a cluster's peers, the newest traffic
record per pair (a late older one ignored), and an agent lacking passive traffic named."""

from __future__ import annotations

from pathlib import Path

import pytest

from faden_agent.devbackend.store import Store
from faden_agent.devbackend.traffic_view import render


def test_backend_cluster_peers_and_the_newest_traffic_record(tmp_path: Path):
    store = Store(tmp_path)
    nodes = []
    for i in (1, 2, 3):
        capabilities = ["traffic.passive"] if i == 1 else ["docker"]  # a2: an agent from before traffic
        node_id, _ = store.enroll(
            store.mint_token(), {"agent_id": f"a{i}", "advertise_host": f"10.0.0.{i}", "capabilities": capabilities}
        )
        nodes.append(node_id)
    with pytest.raises(KeyError):
        store.set_cluster("c", [nodes[0], "node-nope"])
    assert store.set_cluster("c", nodes[:2]) == nodes[:2]
    assert store.peers_message(nodes[0]) == {
        "type": "peers",
        "cluster": "c",
        "peers": [{"node_id": nodes[1], "address": "10.0.0.2"}],
    }
    assert store.peers_message(nodes[2])["peers"] == []
    for at, rate in ((20.0, 5.0), (10.0, 9.0)):  # the older one arrives late: ignored
        store.store_records(
            nodes[0],
            [
                {
                    "id": f"t{at}",
                    "kind": "traffic",
                    "data": {
                        "collected_at": at,
                        "peers": [
                            {
                                "address": "10.0.0.2",
                                "sent_bytes_per_s": rate,
                                "rtt_ms": 0.5,
                                "connections": 1,
                                "interface": "eth0",
                            }
                        ],
                    },
                }
            ],
        )
    matrix = store.traffic_matrix("c")
    assert [m["traffic"]["collected_at"] if m["traffic"] else None for m in matrix["machines"]] == [20.0, None]
    text = "\n".join(render(matrix))
    assert "5B/s 0.50ms eth0" in text
    lacking = next(line for line in text.splitlines() if line.startswith("agent lacks traffic.passive"))
    assert "agent lacks traffic.passive (update it): a2 (" in lacking and "a1 (" not in lacking
