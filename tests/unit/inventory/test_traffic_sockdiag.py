"""sock_diag against the real kernel on loopback (workers/inventory/traffic/sockdiag.py): dumps
filtered by remote address in the kernel with tcp_info, a filter for thousands of peers, and
destroy notifications with the last counters. The whole chain runs in the cluster rig
(tests/cluster/test_traffic.py). The peers are addresses of this module's own (127.0.91.x):
the kernel's dumps and destroy notifications are machine-wide, and other tests running beside
these use 127.0.0.2 and up."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from faden_agent.workers.inventory.traffic import sockdiag
from faden_agent.workers.inventory.traffic.sockdiag import TcpSocket


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
    listener, client, accepted = _pair("127.0.91.2")
    other = _pair("127.0.91.3")
    try:
        _exchange(client, accepted, 300_000)
        _exchange(accepted, client, 7_000)
        time.sleep(0.05)
        found = sockdiag.dump(["127.0.91.2"])
        mine = [s for s in found if s.local == client.getsockname()[0] and s.remote == "127.0.91.2"]
        assert {s.remote for s in found} == {"127.0.91.2"}  # nothing to 127.0.91.3 or others
        ours = next(s for s in found if (s.remote, s.bytes_received) == ("127.0.91.2", 7_000))
        assert ours.bytes_acked - 300_000 in (0, 1) and ours.rtt_us and ours.min_rtt_us
        assert mine and all(s.state == 1 for s in mine)  # ESTABLISHED
        assert sockdiag.dump([]) == []
        assert len(sockdiag.dump(["127.0.91.2", "127.0.91.3", "::1"])) >= 2
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
    server, client, accepted = _pair("127.0.91.2")
    _exchange(client, accepted, 123_456)
    client.close()
    accepted.close()
    server.close()
    seen: list[TcpSocket] = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any(s.bytes_acked >= 123_456 for s in seen):
        seen += [s for s in listener.read() if s.remote == "127.0.91.2" or s.local == "127.0.91.2"]
    listener.close()
    sender = next(s for s in seen if s.remote == "127.0.91.2")
    assert 123_456 <= sender.bytes_acked <= 123_458  # SYN and FIN count one byte each


def test_the_destroy_listener_blocks_until_woken_and_leaves_the_groups_without_peers():
    try:
        listener = sockdiag.DestroyListener()
    except OSError as exc:
        pytest.skip(f"no destroy notifications here: {exc}")
    try:
        listener.subscribe(False)
        server, client, accepted = _pair("127.0.91.2")
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
