"""TCP sockets from the kernel's sock_diag netlink interface, in pure Python."""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
from collections.abc import Iterable, Iterator

from faden_agent.common.wakeable import Wakeable

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
NLMSG_ERROR = 2
NLMSG_DONE = 3
SOL_NETLINK = 270
NETLINK_ADD_MEMBERSHIP = 1
NETLINK_DROP_MEMBERSHIP = 2
SKNLGRP_INET_TCP_DESTROY = 1
SKNLGRP_INET6_TCP_DESTROY = 3

INET_DIAG_INFO = 2
INET_DIAG_REQ_BYTECODE = 1
INET_DIAG_BC_JMP = 1
INET_DIAG_BC_D_COND = 8

# Every TCP state but LISTEN, TIME_WAIT (no tcp_info) and NEW_SYN_RECV.
TCP_STATES = sum(1 << s for s in (1, 2, 3, 4, 5, 7, 8, 9, 11))

_NLMSGHDR = struct.Struct("=IHHII")
_REQ = struct.Struct("=BBBBI")  # family, protocol, ext, pad, states; then inet_diag_sockid
_SOCKID_LEN = 48
_MSG_HEAD = 72  # inet_diag_msg
_RTATTR = struct.Struct("=HH")

# struct tcp_info offsets of what we read
_TCPI = {
    "rtt_us": (68, "I"),
    "min_rtt_us": (148, "I"),
    "total_retrans": (100, "I"),
    "bytes_acked": (120, "Q"),
    "bytes_received": (128, "Q"),
    "segs_out": (136, "I"),
    "bytes_sent": (200, "Q"),
    "bytes_retrans": (208, "Q"),
}
RECV_BUFFER = 1 << 20


class TcpSocket:
    __slots__ = (
        "cookie",
        "state",
        "local",
        "remote",
        "bytes_acked",
        "bytes_received",
        "rtt_us",
        "min_rtt_us",
        "bytes_sent",
        "bytes_retrans",
        "segs_out",
        "total_retrans",
    )

    def __init__(
        self,
        cookie: int,
        state: int,
        local: str,
        remote: str,
        bytes_acked: int,
        bytes_received: int,
        rtt_us: int | None,
        min_rtt_us: int | None,
        bytes_sent: int | None,
        bytes_retrans: int | None,
        segs_out: int | None,
        total_retrans: int | None,
    ) -> None:
        self.cookie = cookie
        self.state = state
        self.local = local
        self.remote = remote
        self.bytes_acked = bytes_acked
        self.bytes_received = bytes_received
        self.rtt_us = rtt_us
        self.min_rtt_us = min_rtt_us
        self.bytes_sent = bytes_sent
        self.bytes_retrans = bytes_retrans
        self.segs_out = segs_out
        self.total_retrans = total_retrans


class SockDiagError(OSError):
    pass


def _address(family: int, raw: bytes) -> str:
    if family == socket.AF_INET:
        return socket.inet_ntop(socket.AF_INET, raw[:4])
    address = ipaddress.IPv6Address(raw)
    return str(address.ipv4_mapped) if address.ipv4_mapped else str(address)


def parse_tcp_info(info: bytes) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for name, (offset, fmt) in _TCPI.items():
        size = struct.calcsize(fmt)
        out[name] = struct.unpack_from("=" + fmt, info, offset)[0] if len(info) >= offset + size else None
    return out


def parse_message(payload: bytes | memoryview) -> TcpSocket | None:
    """One inet_diag_msg with its attributes; None without INET_DIAG_INFO."""
    family, state = payload[0], payload[1]
    if family not in (socket.AF_INET, socket.AF_INET6):
        return None
    sockid = bytes(payload[4 : 4 + _SOCKID_LEN])
    cookie = struct.unpack_from("=Q", sockid, 40)[0]
    offset, info = _MSG_HEAD, None
    while offset + 4 <= len(payload):
        length, kind = _RTATTR.unpack_from(payload, offset)
        if length < 4:
            break
        if kind == INET_DIAG_INFO:
            info = bytes(payload[offset + 4 : offset + length])
        offset += (length + 3) & ~3
    if info is None:
        return None
    fields = parse_tcp_info(info)
    return TcpSocket(
        cookie=cookie,
        state=state,
        local=_address(family, sockid[4:20]),
        remote=_address(family, sockid[20:36]),
        bytes_acked=fields["bytes_acked"] or 0,
        bytes_received=fields["bytes_received"] or 0,
        rtt_us=fields["rtt_us"],
        min_rtt_us=fields["min_rtt_us"],
        bytes_sent=fields["bytes_sent"],
        bytes_retrans=fields["bytes_retrans"],
        segs_out=fields["segs_out"],
        total_retrans=fields["total_retrans"],
    )


def _messages(data: bytes) -> Iterator[tuple[int, memoryview]]:
    view = memoryview(data)
    offset = 0
    while offset + _NLMSGHDR.size <= len(data):
        length, kind, _flags, _seq, _pid = _NLMSGHDR.unpack_from(data, offset)
        if length < _NLMSGHDR.size:
            return
        yield kind, view[offset + _NLMSGHDR.size : offset + length]
        offset += (length + 3) & ~3


def remote_filter(family: int, addresses: Iterable[str]) -> bytes:
    """inet_diag bytecode: accept a socket whose remote address is one of `addresses`.

    Per address: a condition, then an unconditional jump to the end (accept). The
    condition's match steps onto its jump; a miss skips it to the next condition, and the
    last miss lands 4 bytes past the end, which the kernel reads as reject. (A match cannot
    jump to the end itself: that offset is one byte wide.)"""
    conds = []
    for text in addresses:
        address = ipaddress.ip_address(text)
        if address.version == 4:
            # An AF_INET condition also matches v4-mapped addresses on AF_INET6 sockets.
            conds.append(struct.pack("=BBxxi", socket.AF_INET, 32, -1) + address.packed)
        elif family == socket.AF_INET6:
            conds.append(struct.pack("=BBxxi", socket.AF_INET6, 128, -1) + address.packed)
    total = sum(4 + len(c) + 4 for c in conds)
    out = b""
    for index, cond in enumerate(conds):
        size = 4 + len(cond)
        miss = size + 4 if index < len(conds) - 1 else size + 8  # the next condition, or reject
        out += struct.pack("=BBH", INET_DIAG_BC_D_COND, size, miss) + cond
        out += struct.pack("=BBH", INET_DIAG_BC_JMP, 4, total - len(out))
    return out


def _request(family: int, bytecode: bytes | None) -> bytes:
    body = _REQ.pack(family, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), 0, TCP_STATES) + bytes(_SOCKID_LEN)
    if bytecode is not None:
        body += _RTATTR.pack(4 + len(bytecode), INET_DIAG_REQ_BYTECODE) + bytecode
    header = _NLMSGHDR.pack(_NLMSGHDR.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
    return header + body


def dump(peers: Iterable[str] | None = None) -> list[TcpSocket]:
    """TCP sockets with tcp_info; only those whose remote address is in `peers` when given
    (an empty set: none, without asking the kernel)."""
    wanted = None if peers is None else sorted(set(peers))
    if wanted is not None and not wanted:
        return []
    sockets: list[TcpSocket] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as nl:
        nl.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER)
        for family in (socket.AF_INET, socket.AF_INET6):
            bytecode = remote_filter(family, wanted) if wanted is not None else None
            if bytecode == b"":
                continue  # no peer of this family
            nl.send(_request(family, bytecode))
            sockets.extend(_read_dump(nl))
    return sockets


def _read_dump(nl: socket.socket) -> Iterator[TcpSocket]:
    while True:
        data = nl.recv(RECV_BUFFER)
        for kind, payload in _messages(data):
            if kind == NLMSG_DONE:
                return
            if kind == NLMSG_ERROR:
                code = -struct.unpack_from("=i", payload, 0)[0]
                raise SockDiagError(code, f"sock_diag dump refused: {os.strerror(code)}")
            if kind == SOCK_DIAG_BY_FAMILY:
                parsed = parse_message(payload)
                if parsed is not None:
                    yield parsed


class DestroyListener:
    """The kernel's TCP destroy notifications (needs CAP_NET_ADMIN in the namespace).

    read() blocks in the kernel (poll on the socket and a wake pipe, no timeout), so an idle
    host never wakes the listener; subscribe(False) leaves the multicast groups (a machine in
    no cluster has no peer whose closed sockets count), wake() ends a blocked read."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK, NETLINK_SOCK_DIAG)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * RECV_BUFFER)
            self.sock.bind((0, 0))
            self.subscribed = False
            self.subscribe(True)  # fails here, at once, without CAP_NET_ADMIN
        except OSError:
            self.sock.close()
            raise
        self._waiter = Wakeable(self.sock.fileno())
        self.lost = 0  # times the kernel dropped notifications (ENOBUFS)

    def subscribe(self, on: bool) -> None:
        """Join (or leave) the TCP destroy groups; a no-op when already so."""
        if on == self.subscribed:
            return
        option = NETLINK_ADD_MEMBERSHIP if on else NETLINK_DROP_MEMBERSHIP
        for group in (SKNLGRP_INET_TCP_DESTROY, SKNLGRP_INET6_TCP_DESTROY):
            self.sock.setsockopt(SOL_NETLINK, option, group)
        self.subscribed = on

    def read(self, timeout_s: float | None = None) -> list[TcpSocket]:
        """Every socket destroyed and queued so far; waits for the first (at most timeout_s,
        None: until one comes or wake() is called)."""
        self._waiter.wait(timeout_s)
        out: list[TcpSocket] = []
        while True:
            try:
                data = self.sock.recv(RECV_BUFFER)
            except BlockingIOError:
                return out
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    raise
                self.lost += 1
                continue
            out += [
                p
                for kind, payload in _messages(data)
                if kind == SOCK_DIAG_BY_FAMILY
                for p in [parse_message(payload)]
                if p is not None
            ]

    def wake(self) -> None:
        self._waiter.wake()

    def close(self) -> None:
        self.sock.close()
        self._waiter.close()
