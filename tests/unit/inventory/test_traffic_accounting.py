"""The per-peer TCP accounting (workers/inventory/traffic/tcp.py): a baseline, growth, closed
sockets, and a socket destroyed during a dump counted from its last sight."""

from __future__ import annotations

from faden_agent.workers.inventory.traffic.sockdiag import TcpSocket
from faden_agent.workers.inventory.traffic.tcp import TcpAccounting


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
