"""Per-peer TCP accounting from sock_diag: bytes each way, connections, RTT, retransmits."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from faden_agent.workers.inventory.traffic.sockdiag import TcpSocket

FORGET_DESTROYED_S = 60.0  # a dump older than this cannot hold a socket destroyed before it


class PeerTotals:
    __slots__ = ("sent", "received", "sent_all", "retrans")

    def __init__(self, sent: int = 0, received: int = 0, sent_all: int = 0, retrans: int = 0) -> None:
        self.sent = sent
        self.received = received
        self.sent_all = sent_all  # bytes_sent (retransmits included) and bytes_retrans, for the ratio
        self.retrans = retrans


class _Seen:
    __slots__ = ("peer", "sent", "received", "sent_all", "retrans")

    def __init__(self, peer: str, sent: int, received: int, sent_all: int, retrans: int) -> None:
        self.peer = peer
        self.sent = sent
        self.received = received
        self.sent_all = sent_all
        self.retrans = retrans


class PeerView:
    __slots__ = ("totals", "connections", "rtt_us", "min_rtt_us", "local_bytes")

    def __init__(
        self,
        totals: PeerTotals,
        connections: int = 0,
        rtt_us: list[int] | None = None,
        min_rtt_us: list[int] | None = None,
        local_bytes: dict[str, int] | None = None,
    ) -> None:
        self.totals = totals
        self.connections = connections
        self.rtt_us: list[int] = [] if rtt_us is None else rtt_us
        self.min_rtt_us: list[int] = [] if min_rtt_us is None else min_rtt_us
        # local address -> bytes, for the interface
        self.local_bytes: dict[str, int] = {} if local_bytes is None else local_bytes


class TcpAccounting:
    def __init__(self, dump: Callable[[Iterable[str]], list[TcpSocket]]):
        self.dump = dump
        self._lock = threading.Lock()
        self._seen: dict[int, _Seen] = {}
        self._destroyed: dict[int, float] = {}
        self._gone: dict[int, tuple[_Seen, float]] = {}  # absent from the last dump, not yet notified
        self.totals: dict[str, PeerTotals] = {}
        self.closed_counted = 0
        self._peers_seen: set[str] = set()  # the peers of the last sample
        self.local_of: dict[str, str] = {}  # peer -> our address on its last socket seen (live or closed)

    def sample(self, peers: Iterable[str]) -> dict[str, PeerView]:
        peers = set(peers)
        sockets = self.dump(peers)
        views = {p: PeerView(self.totals.setdefault(p, PeerTotals())) for p in peers}
        with self._lock:
            new_peers = peers - self._peers_seen
            live: dict[int, _Seen] = {}
            for sock in sockets:
                if sock.remote not in peers or sock.cookie in self._destroyed:
                    continue  # destroyed while the dump was read: counted by closed()
                now = _counters(sock)
                before = self._seen.get(sock.cookie)
                if before is None:
                    # Open before we first looked at this peer: a baseline, not traffic.
                    before = now if sock.remote in new_peers else _Seen(sock.remote, 0, 0, 0, 0)
                self._add(sock.remote, before, now)
                live[sock.cookie] = now
                view = views[sock.remote]
                view.connections += 1
                if sock.rtt_us:
                    view.rtt_us.append(sock.rtt_us)
                if sock.min_rtt_us:
                    view.min_rtt_us.append(sock.min_rtt_us)
                view.local_bytes[sock.local] = view.local_bytes.get(sock.local, 0) + now.sent + now.received
                self.local_of[sock.remote] = sock.local
            # Gone without a destroy notification yet: the listener reads them in batches, so
            # the last sight stays the baseline of a notification that comes later; with none
            # (the listener is off) what they did since the last sample is lost.
            now_mono = time.monotonic()
            cutoff = now_mono - FORGET_DESTROYED_S
            self._gone = {c: g for c, g in self._gone.items() if g[1] > cutoff}
            self._gone.update({c: (seen, now_mono) for c, seen in self._seen.items() if c not in live})
            self._seen = live
            self._peers_seen = peers
            self._destroyed = {c: t for c, t in self._destroyed.items() if t > cutoff}
        return views

    def closed(self, sockets: Iterable[TcpSocket]) -> None:
        with self._lock:
            for sock in sockets:
                if sock.remote not in self._peers_seen:
                    continue
                gone = self._gone.pop(sock.cookie, None)
                before = self._seen.pop(sock.cookie, None) or (gone and gone[0]) or _Seen(sock.remote, 0, 0, 0, 0)
                self._add(sock.remote, before, _counters(sock))
                self._destroyed[sock.cookie] = time.monotonic()
                self.local_of[sock.remote] = sock.local
                self.closed_counted += 1

    def _add(self, peer: str, before: _Seen, now: _Seen) -> None:
        totals = self.totals.setdefault(peer, PeerTotals())
        totals.sent += max(0, now.sent - before.sent)
        totals.received += max(0, now.received - before.received)
        totals.sent_all += max(0, now.sent_all - before.sent_all)
        totals.retrans += max(0, now.retrans - before.retrans)


def _counters(sock: TcpSocket) -> _Seen:
    if sock.bytes_sent is not None and sock.bytes_retrans is not None:
        sent_all, retrans = sock.bytes_sent, sock.bytes_retrans
    else:  # kernels before 4.19: segments instead of bytes
        sent_all, retrans = sock.segs_out or 0, sock.total_retrans or 0
    return _Seen(sock.remote, sock.bytes_acked, sock.bytes_received, sent_all, retrans)
