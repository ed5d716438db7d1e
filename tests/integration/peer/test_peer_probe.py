"""Active probes over the peer port, on loopback against the real PeerServer: the
prober (transfers/probe_client.py) measures round trips and both directions within its bounds,
tickets are the image endpoints' one-time tickets, and the answering side caps what a
hostile prober can make it send or swallow (transfers/probe.py)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from faden_agent.transfers import probe
from faden_agent.transfers.probe_client import Bounds, Probe, ProbeFailed
from faden_agent.transfers.server import PeerServer
from faden_agent.transfers.tickets import PROBE_GRANT, Ticket, TicketBox, ticket_hash
from tests.support.agentproc import wait_for
from tests.support.backendproc import free_port
from tests.support.selfsigned import self_signed

MiB = 1 << 20


@pytest.fixture
def peer(tmp_path):
    box = TicketBox(tmp_path)
    server = PeerServer("127.0.0.1", 0, box, lambda: None)
    threading.Thread(target=server.serve, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()


def grant(server: PeerServer, name: str, what: str = PROBE_GRANT, receiver: str = "127.0.0.1", ttl_s: float = 60):
    ticket = name * 32
    server.tickets.add(ticket_hash(ticket), Ticket(what, receiver, time.time() + ttl_s))
    return ticket


def run(server: PeerServer, ticket: str, **bounds) -> dict:
    bounds = {"duration_s": 1.0, "max_bytes": 4 * MiB, "round_trips": 20, **bounds}
    return Probe(f"http://127.0.0.1:{server.port}", ticket, Bounds(**bounds)).run()


def test_a_probe_measures_round_trips_and_both_directions_once_per_ticket(peer):
    ticket = grant(peer, "a")
    figures = run(peer, ticket, max_bytes=8 * MiB, round_trips=50)
    print(figures)
    assert figures["round_trips"] == 50
    assert 0 < figures["rtt_min_ms"] <= figures["rtt_p50_ms"] <= figures["rtt_p99_ms"] < 1000
    assert figures["send_bytes"] == figures["receive_bytes"] == 8 * MiB  # loopback: the bytes bound ends both
    assert figures["send_bytes_per_s"] > 0 and figures["receive_bytes_per_s"] > 0
    wait_for(lambda: peer.status()["probes_served"] == 1, 10, what="the session to end on the peer")
    assert peer.status()["probes_active"] == 0
    with pytest.raises(ProbeFailed) as again:  # a ticket is spent by its first use
        run(peer, ticket)
    assert again.value.reason == "ticket_refused"


def test_the_time_bound_ends_a_phase_before_its_bytes(peer):
    started = time.monotonic()
    figures = run(peer, grant(peer, "b"), duration_s=0.3, max_bytes=1 << 40, round_trips=1_000_000)
    took = time.monotonic() - started
    print(figures, f"{took:.2f} s")
    assert figures["send_bytes"] < 1 << 40 and figures["receive_bytes"] < 1 << 40
    assert figures["send_s"] < 0.3 + 2 and figures["receive_s"] < 0.3 + 2
    assert figures["round_trips"] < 1_000_000
    assert took < 3 * 0.3 + 6  # three phases of 0.3 s, each allowed to drain


def test_a_small_max_bytes_ends_the_transfer_early(peer):
    figures = run(peer, grant(peer, "c"), duration_s=20, max_bytes=100_000)
    assert figures["send_bytes"] == figures["receive_bytes"] == 100_000
    assert figures["send_s"] < 5 and figures["receive_s"] < 5  # not the 20 s of the time bound


@pytest.mark.parametrize(
    ("what", "receiver", "ttl_s", "reason"),
    [
        ("sha256:" + "0" * 64, "127.0.0.1", 60, "ticket_refused"),  # an image's ticket opens no probe
        (PROBE_GRANT, "198.18.0.99", 60, "ticket_refused"),  # for another machine
        (PROBE_GRANT, "127.0.0.1", -1, "ticket_expired"),
    ],
)
def test_tickets_for_something_else_are_refused(peer, what, receiver, ttl_s, reason):
    with pytest.raises(ProbeFailed) as refused:
        run(peer, grant(peer, "d", what, receiver, ttl_s))
    assert refused.value.reason == reason


def test_an_unknown_ticket_and_a_peer_that_is_down(peer):
    with pytest.raises(ProbeFailed) as unknown:
        run(peer, "e" * 32)
    assert unknown.value.reason == "ticket_refused"
    down = Probe(f"http://127.0.0.1:{free_port()}", "f" * 32, Bounds(1.0, MiB, 5))
    with pytest.raises(ProbeFailed) as refused:
        down.run()
    assert refused.value.reason == "peer_unreachable"


def raw_session(server: PeerServer, ticket: str) -> tuple[socket.socket, object]:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(
        (
            f"POST {probe.PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ticket}\r\n"
            f"Connection: Upgrade\r\nUpgrade: {probe.UPGRADE}\r\nContent-Length: 0\r\n\r\n"
        ).encode()
    )
    rfile = sock.makefile("rb")
    assert rfile.readline().split()[1] == b"101"
    while rfile.readline() not in (b"\r\n", b""):
        pass
    return sock, rfile


def test_a_hostile_prober_cannot_make_the_peer_send_or_swallow_unbounded_bytes(peer):
    peer.probe_limits = probe.Limits(bytes=2 * MiB, seconds=1.0, echoes=10, session_s=30, idle_s=2)
    # A download of 2**64-1 bytes for 1e308 s: the peer sends its 2 MiB cap, then F.
    sock, rfile = raw_session(peer, grant(peer, "g"))
    sock.sendall(probe.frame(b"S", probe.ASK.pack(2**64 - 1, 1e308)))
    received = 0
    while True:
        op, length = probe.HEADER.unpack(rfile.read(probe.HEADER.size))
        payload = rfile.read(length)
        if op != b"D":
            break
        received += len(payload)
    assert op == b"F" and received == probe.RESULT.unpack(payload)[0] == 2 * MiB
    # A second download in the same session: the cap is the session's, nothing more comes.
    sock.sendall(probe.frame(b"S", probe.ASK.pack(MiB, 1.0)))
    op, length = probe.HEADER.unpack(rfile.read(probe.HEADER.size))
    assert op == b"F" and probe.RESULT.unpack(rfile.read(length))[0] == 0
    sock.close()

    # An upload past the cap: refused with X, then the connection ends.
    sock, rfile = raw_session(peer, grant(peer, "h"))
    with pytest.raises(OSError):
        for _ in range(64):
            sock.sendall(probe.frame(b"D", bytes(256 << 10)))
    sock.close()

    # Oversized frames, unknown ops and too many echoes: X, then the end.
    for hostile in (
        probe.HEADER.pack(b"D", probe.FRAME_MAX + 1),
        probe.HEADER.pack(b"E", 1 << 30),
        probe.frame(b"Z", b"x"),
        probe.frame(b"S", probe.ASK.pack(10, -1.0)),
        probe.frame(b"S", probe.ASK.pack(10, float("nan"))),
        probe.frame(b"E", b"12345678") * 11,
    ):
        sock, rfile = raw_session(peer, grant(peer, "i"))
        sock.sendall(hostile)
        frames = []
        while head := rfile.read(probe.HEADER.size):
            op, length = probe.HEADER.unpack(head)
            frames.append((op, rfile.read(length)))
        assert frames[-1][0] == b"X", (hostile[:16], frames[-3:])
        sock.close()
    wait_for(lambda: peer.status()["probes_active"] == 0, 10, what="every session to end on the peer")


def test_an_idle_prober_is_dropped(peer):
    peer.probe_limits = probe.Limits(idle_s=0.5)
    sock, rfile = raw_session(peer, grant(peer, "j"))
    started = time.monotonic()
    assert rfile.read(1) == b""  # the peer closed the idle session
    assert time.monotonic() - started < 5
    sock.close()


def test_a_probe_over_https_with_the_operators_certificate(tmp_path):
    """ADVERTISE_SCHEME=https: the probe speaks TLS too; a prober not trusting the
    certificate gets peer_unreachable, one trusting it measures."""
    cert, key = self_signed(tmp_path)
    server = PeerServer("127.0.0.1", 0, TicketBox(tmp_path), lambda: None, tls=(str(cert), str(key)))
    threading.Thread(target=server.serve, daemon=True).start()
    try:
        address = f"https://127.0.0.1:{server.port}"
        with pytest.raises(ProbeFailed) as untrusted:
            Probe(address, grant(server, "k"), Bounds(0.5, MiB, 5), verify=True).run()
        assert untrusted.value.reason == "peer_unreachable" and "TLS" in untrusted.value.message
        figures = Probe(address, grant(server, "l"), Bounds(0.5, MiB, 5), verify=str(cert)).run()
        assert figures["round_trips"] == 5 and figures["send_bytes"] == figures["receive_bytes"] == MiB
    finally:
        server.shutdown()


def test_a_stopped_probe_ends_at_once_even_when_the_peer_is_silent():
    """Cancel or deadline: the job's abort hook shuts the socket, so a probe blocked on a
    silent peer ends now (Stopped), not after its timeout."""
    from faden_agent.common.failure import Stopped

    silent = socket.create_server(("127.0.0.1", 0))
    hooks, stop = [], threading.Event()
    attempt = Probe(
        f"http://127.0.0.1:{silent.getsockname()[1]}",
        "m" * 32,
        Bounds(20.0, MiB, 5),
        should_stop=stop.is_set,
        on_abort=hooks.append,
    )
    outcome: list = []

    def run() -> None:
        try:
            attempt.run()
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            outcome.append(exc)

    runner = threading.Thread(target=run)
    started = time.monotonic()
    runner.start()
    wait_for(lambda: hooks, 5, what="the probe to register its abort hook")
    stop.set()
    for hook in hooks:
        hook()
    runner.join(10)
    assert [type(e) for e in outcome] == [Stopped], outcome
    assert time.monotonic() - started < 4  # the connect timeout alone is 5 s
    silent.close()


def test_the_ticket_is_judged_before_a_probe_slot_is_taken(peer):
    """Every slot held by an honest session: a probe without a ticket is refused for its
    ticket (so a flood of them never holds a slot an honest probe needs), one with a ticket is busy."""
    held = []
    for i in range(probe.MAX_SESSIONS):
        conn = socket.create_connection(("127.0.0.1", peer.port), timeout=10)
        conn.sendall(
            f"POST {probe.PATH} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: {probe.UPGRADE}\r\n"
            f"Authorization: Bearer {grant(peer, str(i))}\r\nContent-Length: 0\r\n\r\n".encode()
        )
        assert conn.recv(12) == b"HTTP/1.1 101"
        held.append(conn)  # upgraded, then silent: the session holds its slot
    try:
        wait_for(lambda: peer.status()["probes_active"] == probe.MAX_SESSIONS, 10, what="every probe slot taken")
        with pytest.raises(ProbeFailed) as flood:
            run(peer, "z" * 32)
        with pytest.raises(ProbeFailed) as honest:
            run(peer, grant(peer, "h"))
        assert (flood.value.reason, honest.value.reason) == ("ticket_refused", "peer_busy")
    finally:
        for conn in held:
            conn.close()
