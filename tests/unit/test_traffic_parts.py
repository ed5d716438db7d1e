"""The traffic parts one by one (issue 15): sock_diag against the real kernel on loopback,
the per-peer accounting, the InfiniBand sysfs reader on a fake tree, the change rule, the
NCCL fall-back watch, the peers file, the backend's cluster store and the admin table.
The whole chain runs in the cluster rig (tests/cluster/test_traffic.py)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from faden_agent.devbackend.store import Store
from faden_agent.devbackend.traffic_view import render
from faden_agent.node.cluster import PeerFile, parse_peers, write_peers
from faden_agent.workers.inventory.traffic import infiniband, sockdiag
from faden_agent.workers.inventory.traffic.nccl import FallbackWatch
from faden_agent.workers.inventory.traffic.report import changed
from faden_agent.workers.inventory.traffic.sockdiag import TcpSocket
from faden_agent.workers.inventory.traffic.tcp import TcpAccounting


def _pair(server_address: str) -> tuple[socket.socket, socket.socket, socket.socket]:
    listener = socket.create_server((server_address, 0))
    client = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()
    return listener, client, accepted


def _exchange(a: socket.socket, b: socket.socket, size: int) -> None:
    a.sendall(b"z" * size)
    got = 0
    while got < size:
        got += len(b.recv(1 << 16))


def test_dump_filters_by_remote_address_in_the_kernel_and_reads_tcp_info():
    listener, client, accepted = _pair("127.0.0.2")
    other = _pair("127.0.0.3")
    try:
        _exchange(client, accepted, 300_000)
        _exchange(accepted, client, 7_000)
        time.sleep(0.05)
        found = sockdiag.dump(["127.0.0.2"])
        mine = [s for s in found if s.local == client.getsockname()[0] and s.remote == "127.0.0.2"]
        assert {s.remote for s in found} == {"127.0.0.2"}  # nothing to 127.0.0.3 or others
        ours = next(s for s in found if (s.remote, s.bytes_received) == ("127.0.0.2", 7_000))
        assert ours.bytes_acked - 300_000 in (0, 1) and ours.rtt_us and ours.min_rtt_us
        assert mine and all(s.state == 1 for s in mine)  # ESTABLISHED
        assert sockdiag.dump([]) == []
        assert len(sockdiag.dump(["127.0.0.2", "127.0.0.3", "::1"])) >= 2
    finally:
        for s in (listener, client, accepted, *other):
            s.close()


def test_filter_bytecode_takes_thousands_of_peers():
    peers = [f"10.{i // 250}.{i % 250}.1" for i in range(2000)]
    assert len(sockdiag.remote_filter(socket.AF_INET, peers)) == 2000 * 20
    assert sockdiag.dump(peers) == []  # the kernel accepted it (an invalid one is an error)


def test_destroy_notifications_carry_the_last_counters():
    try:
        listener = sockdiag.DestroyListener()
    except OSError as exc:
        pytest.skip(f"no destroy notifications here: {exc}")
    server, client, accepted = _pair("127.0.0.2")
    _exchange(client, accepted, 123_456)
    client.close()
    accepted.close()
    server.close()
    seen: list[TcpSocket] = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any(s.bytes_acked >= 123_456 for s in seen):
        seen += [s for s in listener.read() if s.remote == "127.0.0.2" or s.local == "127.0.0.2"]
    listener.close()
    sender = next(s for s in seen if s.remote == "127.0.0.2")
    assert 123_456 <= sender.bytes_acked <= 123_458  # SYN and FIN count one byte each


def _sock(cookie: int, remote: str, sent: int, received: int, rtt: int = 1000) -> TcpSocket:
    return TcpSocket(cookie, 1, "10.0.0.1", remote, sent, received, rtt, rtt // 2, sent, 0, None, None)


def test_accounting_baseline_growth_closed_and_a_socket_destroyed_during_a_dump():
    live: list[TcpSocket] = []
    tcp = TcpAccounting(lambda peers: [s for s in live if s.remote in peers])
    live[:] = [_sock(1, "10.0.0.2", 5_000, 100)]  # open before we looked: a baseline
    view = tcp.sample(["10.0.0.2"])["10.0.0.2"]
    assert (view.totals.sent, view.totals.received, view.connections) == (0, 0, 1)
    live[:] = [_sock(1, "10.0.0.2", 8_000, 150), _sock(2, "10.0.0.2", 10, 20), _sock(3, "10.9.9.9", 99, 99)]
    view = tcp.sample(["10.0.0.2"])["10.0.0.2"]
    assert (view.totals.sent, view.totals.received, view.connections) == (3_010, 70, 2)
    # socket 2 closes with more traffic; a short one (4) opens and closes between samples
    tcp.closed([_sock(2, "10.0.0.2", 500, 20), _sock(4, "10.0.0.2", 1_000, 2_000), _sock(5, "10.9.9.9", 7, 7)])
    assert (tcp.totals["10.0.0.2"].sent, tcp.totals["10.0.0.2"].received) == (3_010 + 490 + 1_000, 70 + 2_000)
    # a dump read before socket 2's destruction still lists it: not counted twice
    live[:] = [_sock(1, "10.0.0.2", 8_000, 150), _sock(2, "10.0.0.2", 500, 20)]
    view = tcp.sample(["10.0.0.2"])["10.0.0.2"]
    assert (view.totals.sent, view.connections) == (4_500, 1)
    assert tcp.local_of["10.0.0.2"] == "10.0.0.1"


def test_a_notification_read_after_the_socket_left_the_dump_counts_from_its_last_sight():
    """The listener reads destroy notifications in batches (once a second at most): a
    socket already gone from the next dump must not count its bytes twice."""
    live: list[TcpSocket] = []
    tcp = TcpAccounting(lambda peers: [s for s in live if s.remote in peers])
    tcp.sample(["10.0.0.2"])
    live[:] = [_sock(7, "10.0.0.2", 1_000, 10)]
    assert tcp.sample(["10.0.0.2"])["10.0.0.2"].totals.sent == 1_000
    live[:] = []  # destroyed; its notification still queued in the kernel
    tcp.sample(["10.0.0.2"])
    tcp.closed([_sock(7, "10.0.0.2", 1_200, 10)])
    assert tcp.totals["10.0.0.2"].sent == 1_200


def test_the_destroy_listener_blocks_until_woken_and_leaves_the_groups_without_peers():
    try:
        listener = sockdiag.DestroyListener()
    except OSError as exc:
        pytest.skip(f"no destroy notifications here: {exc}")
    try:
        listener.subscribe(False)
        server, client, accepted = _pair("127.0.0.2")
        for s in (client, accepted, server):
            s.close()
        assert listener.read(timeout_s=0.3) == []  # left the groups: nothing queued
        done: list[list[TcpSocket]] = []
        reader = threading.Thread(target=lambda: done.append(listener.read()))
        reader.start()
        time.sleep(0.3)
        assert not done  # blocked in the kernel, no timeout
        listener.wake()
        reader.join(5)
        assert done == [[]]
    finally:
        listener.close()


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_infiniband_counters_in_4_byte_units_ext_counters_and_a_port_without_any(tmp_path: Path):
    assert infiniband.read_ports(tmp_path) is None  # no RDMA device at all
    port = tmp_path / "class/infiniband/mlx5_0/ports/1"
    _write(port / "state", "4: ACTIVE\n")
    _write(port / "link_layer", "Ethernet\n")
    _write(port / "counters/port_xmit_data", "4294967295\n")  # a saturated 32-bit counter
    _write(port / "counters/port_rcv_data", "250\n")
    _write(port / "counters_ext/port_xmit_data_64", "10000000000\n")  # wins where present
    _write(port / "hw_counters/np_cnp_sent", "12\n")
    _write(tmp_path / "class/infiniband/hfi1_0/ports/1/state", "1: DOWN\n")
    ports = {p["device"]: p for p in infiniband.read_ports(tmp_path)}
    roce = ports["mlx5_0"]
    assert roce["counters"]["tx_bytes"] == 40_000_000_000 and roce["counters"]["rx_bytes"] == 1_000
    assert roce["state"] == "ACTIVE" and roce["link_layer"] == "Ethernet" and roce["congestion"] == {"np_cnp_sent": 12}
    assert ports["hfi1_0"]["counters"] is None and "not measured" in ports["hfi1_0"]["note"]


def _record(rate: float | None, rtt: float | None = 1.0, connections: int = 1) -> dict:
    return {
        "cluster": "c",
        "not_measured": [],
        "infiniband": None,
        "nics": [],
        "peers": [
            {
                "address": "10.0.0.2",
                "sent_bytes_per_s": rate,
                "received_bytes_per_s": 0.0,
                "rtt_ms": rtt,
                "min_rtt_ms": rtt,
                "connections": connections,
                "interface": "eth0",
                "node_id": "n2",
                "sent_bytes": 123,
            }
        ],
    }


def test_a_record_is_sent_only_when_it_changed_beyond_the_thresholds():
    assert changed(None, _record(0.0))
    assert not changed(_record(0.0), _record(1000.0))  # under 64 KiB/s
    assert not changed(_record(10e6), _record(10.5e6))  # under 10 %
    assert changed(_record(10e6), _record(12e6))
    assert changed(_record(None), _record(0.0))  # measured at last
    assert not changed(_record(0.0, rtt=10.0), _record(0.0, rtt=10.8))
    assert changed(_record(0.0, rtt=10.0), _record(0.0, rtt=20.0))
    assert changed(_record(0.0), _record(0.0, connections=2))
    counted = [dict(_record(0.0), not_measured=[f"sockets in {n} other network namespaces"]) for n in (3, 4)]
    assert not changed(*counted) and changed(_record(0.0), counted[0])  # the count moves; the note comes


def _sample(tcp_rate: float, rdma_rate: float | None, at: float) -> dict:
    port = {
        "device": "mlx5_0",
        "port": "1",
        "state": "ACTIVE",
        "counters": {"tx_bytes": 1},
        "tx_bytes_per_s": rdma_rate,
        "rx_bytes_per_s": 0.0,
    }
    return {
        "collected_at": at,
        "infiniband": [port],
        "peers": [{"address": "10.0.0.2", "node_id": "n2", "sent_bytes_per_s": tcp_rate, "received_bytes_per_s": 0}],
    }


def test_nccl_fallback_warning_after_two_samples_once_per_episode():
    watch = FallbackWatch()
    assert watch.check(_sample(50e6, 0.0, 1)) is None
    event = watch.check(_sample(50e6, 0.0, 2))
    assert event["type"] == "traffic.rdma_idle_under_tcp_load" and event["peers"][0]["address"] == "10.0.0.2"
    assert watch.check(_sample(50e6, 0.0, 3)) is None  # once per episode
    assert watch.check(_sample(50e6, 40e6, 4)) is None  # RDMA moves: over, re-armed
    assert watch.check(_sample(50e6, 0.0, 5)) is None
    assert watch.check(_sample(50e6, 0.0, 6)) is not None
    assert FallbackWatch().check({**_sample(50e6, 0.0, 7), "infiniband": None}) is None  # no RDMA: no warning


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


def test_nic_counters_survive_a_host_without_link_stats(monkeypatch):
    """psutil.net_if_stats raises ENOSYS under qemu-user (no SIOCETHTOOL): the whole traffic
    sample failed every interval; now speed and link state are unknown (None), counters stay."""
    from faden_agent.workers.inventory.traffic import nics

    def no_ethtool():
        raise OSError(38, "Function not implemented (originated from ioctl(SIOCETHTOOL))")

    monkeypatch.setattr(nics.psutil, "net_if_stats", no_ethtool)
    read = nics.read_nics()
    assert read, "this host has a NIC besides lo"
    for nic in read.values():
        assert nic["up"] is None and nic["speed_mbps"] is None
        assert nic["counters"]["rx_bytes"] >= 0


def test_a_peers_message_that_cannot_be_written_does_not_raise(tmp_path: Path):
    """The downlink thread writes it: an OSError (disk full) must not end that critical thread."""
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    assert not write_peers(
        not_a_dir, {"type": "peers", "cluster": "c", "peers": [{"node_id": "n2", "address": "10.0.0.2"}]}
    )
