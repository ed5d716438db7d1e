"""The accepting thread: a selector over the listening socket and every connection that has
not yet sent a whole request head (none has shown a ticket). It runs TLS handshakes and reads
heads without blocking, each under a deadline; hands a complete head to the pool. Waiting
connections have a budget well below the descriptor limit, in all and per source address:
past it, or out of descriptors, the least recently active one is dropped for the newest."""

from __future__ import annotations

import errno
import heapq
import itertools
import logging
import os
import resource
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from faden_agent.http.serve.conn import RECV, Conn

if TYPE_CHECKING:
    from faden_agent.protocol.status import ConnectionFigures

log = logging.getLogger(__name__)

ACCEPT_BATCH = 64  # connections taken per wake-up: the waiting ones are served in between
BATCH_SHARE = 4  # nor more than this share of the waiting budget
OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
PAUSE_S = 0.1  # accepting rests this long when not even the spare descriptor helps
# A connection closed with unread bytes (a refused body) would be reset, and the client lose
# the answer: its sending side is shut, and what still comes is drained this long, this much.
LINGER_S = 2.0
LINGER_BYTES = 1 << 20
# The waiting connections' budget: half the descriptors left beside those the pool may hold,
# at least MIN_WAITING; one source address at most a quarter of it (at least MIN_PER_ADDRESS).
MIN_WAITING = 16
ADDRESS_SHARE = 4
MIN_PER_ADDRESS = 4
DROP_REASONS = ("budget", "address_budget", "out_of_descriptors", "timed_out", "refused")
HEAD_TOO_LARGE = b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


@dataclass(eq=False)
class Waiting:
    conn: Conn
    deadline: float
    handshaking: bool
    events: int = selectors.EVENT_READ
    line_seen: bool = False
    draining: bool = False
    opened: float = field(default_factory=time.monotonic)


def head_complete(buffer: bytearray) -> bool:
    return b"\n\r\n" in buffer or b"\n\n" in buffer


@dataclass(frozen=True)
class Budget:
    total: int
    per_address: int


def budget_for(max_waiting: int, reserved: int) -> Budget:
    """The waiting connections' budget under the descriptor limit now (`reserved`: the
    descriptors the pool and the process itself may hold)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = max_waiting if soft == resource.RLIM_INFINITY else (soft - reserved) // 2
    total = max(MIN_WAITING, min(max_waiting, room))
    return Budget(total, max(MIN_PER_ADDRESS, total // ADDRESS_SHARE))


class Acceptor:
    def __init__(
        self,
        listener: socket.socket,
        tls: ssl.SSLContext | None,
        *,
        max_waiting: int,
        reserved: int,
        head_s: Callable[[bytes], float],
        first_line_s: float,
        keepalive_s: float,
        idle_s: float,
        max_head: int,
        hand_off: Callable[[Conn], None],
    ):
        self.listener = listener
        self.tls = tls
        self.max_waiting = max_waiting
        self.reserved = reserved
        self.budget = budget_for(max_waiting, reserved)
        self.head_s = head_s  # the route's head bound, from the request line
        self.first_line_s = first_line_s
        self.keepalive_s = keepalive_s
        self.idle_s = idle_s
        self.max_head = max_head
        self.hand_off = hand_off
        self.selector = selectors.DefaultSelector()
        # by fd, least recently active first; and the same per source address
        self.waiting: dict[int, Waiting] = {}
        self.by_address: dict[str, dict[int, Waiting]] = {}
        self.deadlines: list[tuple[float, int, int, Waiting]] = []
        self.order = itertools.count()
        self.returned: deque[tuple[Conn, bool]] = deque()
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        self.stopping = False
        self.paused_until = 0.0
        self.spare: int | None = None
        self.accepted = 0
        self.dropped = dict.fromkeys(DROP_REASONS, 0)
        self.lock = threading.Lock()

    def figures(self) -> ConnectionFigures:
        return {
            "accepted": self.accepted,
            "waiting": len(self.waiting),
            "budget": {"total": self.budget.total, "per_address": self.budget.per_address},
            "dropped": dict(self.dropped),
        }

    # --- from other threads

    def give_back(self, conn: Conn, keep: bool) -> None:
        """A connection whose answer is done: wait for its next head (keep), or close it once
        the client has read the answer."""
        with self.lock:
            self.returned.append((conn, keep))
        self._wake()

    def stop(self) -> None:
        self.stopping = True
        self._wake()

    def _wake(self) -> None:
        try:
            self.wake_w.send(b"w")
        except OSError:  # its buffer is full: a wake-up is pending anyway
            pass

    # --- the loop

    def run(self) -> None:
        self.listener.setblocking(False)
        self._reserve()
        self.selector.register(self.listener, selectors.EVENT_READ, "listener")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")
        try:
            while not self.stopping:
                self._round(self._wait_s())
        finally:
            for waiting in list(self.waiting.values()):
                self._drop(waiting)
            self.selector.close()
            self.wake_r.close()
            self.wake_w.close()
            if self.spare is not None:
                os.close(self.spare)

    def _round(self, wait_s: float | None) -> None:
        """One wake-up: what the waiting connections sent is read before new ones are taken,
        so a connection accepted in the last batch has its head read before a flood's next
        batch can make it the least recently active."""
        listener_ready = False
        for key, _ in self.selector.select(wait_s):
            if key.data == "listener":
                listener_ready = True
            elif key.data == "wake":
                self._take_returned()
            else:
                self._progress(key.data)
        if listener_ready:
            self._accept()
        self._expire()
        self._resume()

    def _wait_s(self) -> float | None:
        times = [self.deadlines[0][0]] if self.deadlines else []
        if self.paused_until:
            times.append(self.paused_until)
        return max(0.0, min(times) - time.monotonic()) if times else None

    def _reserve(self) -> None:
        try:
            self.spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.spare = None

    def _accept(self) -> None:
        self.budget = budget_for(self.max_waiting, self.reserved)  # the limit may have moved
        # a quarter of the budget at most: a connection taken now stays through three more
        # batches, each followed by a read of what it sent, before it can be the one dropped
        for _ in range(min(ACCEPT_BATCH, self.budget.total // BATCH_SHARE)):
            try:
                sock, address = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno not in OUT_OF_DESCRIPTORS:
                    return  # ECONNABORTED and the like: that one connection's end
                if self.waiting:  # the least recently active waiting one makes room
                    self._drop(next(iter(self.waiting.values())), "out_of_descriptors")
                    continue
                return self._refuse_newest()
            self.accepted += 1
            self._make_room(address[0])
            try:
                sock.setblocking(False)
                if self.tls is not None:
                    sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            except (OSError, ValueError):
                sock.close()
                continue
            conn = Conn(sock, address[:2], self.idle_s)
            waiting = Waiting(conn, time.monotonic() + self.first_line_s, self.tls is not None)
            self._watch(waiting)
            self._progress(waiting)  # a client that sent at once leaves the waiting ones at once

    def _make_room(self, address: str) -> None:
        """Room for one more waiting connection from `address`: its least recently active
        one goes past its share, the least recently active of all past the total."""
        mine = self.by_address.get(address) or {}
        while len(mine) >= self.budget.per_address:
            self._drop(next(iter(mine.values())), "address_budget")
        while len(self.waiting) >= self.budget.total:
            self._drop(next(iter(self.waiting.values())), "budget")

    def _refuse_newest(self) -> None:
        """Out of descriptors with none waiting: the spare one makes room to accept and close
        the newest connection (it would wait in the backlog, and wake this loop, for nothing)."""
        self.dropped["refused"] += 1
        if self.spare is not None:
            os.close(self.spare)
            self.spare = None
            try:
                sock, _ = self.listener.accept()
                sock.close()
            except OSError:
                pass
            self._reserve()
        if self.spare is None:
            self.selector.unregister(self.listener)
            self.paused_until = time.monotonic() + PAUSE_S

    def _resume(self) -> None:
        if self.paused_until and time.monotonic() >= self.paused_until:
            self.paused_until = 0.0
            if self.spare is None:
                self._reserve()
            self.selector.register(self.listener, selectors.EVENT_READ, "listener")

    def _watch(self, waiting: Waiting) -> None:
        fd = waiting.conn.sock.fileno()
        self.waiting[fd] = waiting
        self.by_address.setdefault(waiting.conn.address[0], {})[fd] = waiting
        self.selector.register(fd, waiting.events, waiting)
        heapq.heappush(self.deadlines, (waiting.deadline, next(self.order), fd, waiting))

    def _take_returned(self) -> None:
        try:
            while self.wake_r.recv(4096):
                pass
        except OSError:
            pass
        with self.lock:
            returned, self.returned = list(self.returned), deque()
        for conn, keep in returned:
            if keep and head_complete(conn.buffer):
                self.hand_off(conn)
                continue
            try:
                if not keep:
                    conn.sock = conn.plain()
                    conn.sock.shutdown(socket.SHUT_WR)
                conn.sock.setblocking(False)
            except OSError:
                conn.close()
                continue
            self._make_room(conn.address[0])
            deadline = time.monotonic() + (self.keepalive_s if keep else LINGER_S)
            waiting = Waiting(conn, deadline, handshaking=False, draining=not keep)
            self._watch(waiting)
            self._progress(waiting)  # TLS may hold decrypted bytes the selector cannot see

    def _progress(self, waiting: Waiting) -> None:
        conn = waiting.conn
        if waiting.draining:
            return self._drain(waiting)
        want = selectors.EVENT_READ
        try:
            if waiting.handshaking:
                conn.sock.do_handshake()  # type: ignore[attr-defined]
                waiting.handshaking = False
            while len(conn.buffer) <= self.max_head and not head_complete(conn.buffer):
                data = conn.sock.recv(RECV)
                if not data:
                    return self._drop(waiting)
                conn.buffer += data
                self._active(waiting)
        except ssl.SSLWantWriteError:
            want = selectors.EVENT_WRITE
        except (ssl.SSLWantReadError, BlockingIOError):
            pass
        except OSError:  # reset, a failed handshake (ssl.SSLError)
            return self._drop(waiting)
        if head_complete(conn.buffer):
            self._forget(waiting)
            return self.hand_off(conn)
        if len(conn.buffer) > self.max_head:
            try:
                conn.sock.send(HEAD_TOO_LARGE)
            except OSError:
                pass
            return self._drop(waiting)
        if not waiting.line_seen and b"\n" in conn.buffer:
            waiting.line_seen = True
            line = bytes(conn.buffer[: conn.buffer.index(b"\n")])
            deadline = waiting.opened + self.head_s(line)
            if deadline < waiting.deadline:
                waiting.deadline = deadline
                heapq.heappush(self.deadlines, (deadline, next(self.order), conn.sock.fileno(), waiting))
        if want != waiting.events:
            waiting.events = want
            self.selector.modify(conn.sock.fileno(), want, waiting)

    def _drain(self, waiting: Waiting) -> None:
        try:
            while len(data := waiting.conn.sock.recv(RECV)) and waiting.conn.read_count < LINGER_BYTES:
                waiting.conn.read_count += len(data)
        except BlockingIOError:
            return
        except OSError:
            pass
        self._drop(waiting)

    def _expire(self) -> None:
        now = time.monotonic()
        while self.deadlines and self.deadlines[0][0] <= now:
            deadline, _, fd, waiting = heapq.heappop(self.deadlines)
            if self.waiting.get(fd) is waiting and waiting.deadline == deadline:
                self._drop(waiting, "timed_out")

    def _active(self, waiting: Waiting) -> None:
        """`waiting` sent something: the last to be dropped for room now."""
        fd = waiting.conn.sock.fileno()
        if self.waiting.get(fd) is waiting:
            self.waiting[fd] = self.waiting.pop(fd)
            mine = self.by_address[waiting.conn.address[0]]
            mine[fd] = mine.pop(fd)

    def _forget(self, waiting: Waiting) -> None:
        fd = waiting.conn.sock.fileno()
        if self.waiting.get(fd) is waiting:
            del self.waiting[fd]
            mine = self.by_address[waiting.conn.address[0]]
            del mine[fd]
            if not mine:
                del self.by_address[waiting.conn.address[0]]
            self.selector.unregister(fd)

    def _drop(self, waiting: Waiting, reason: str | None = None) -> None:
        if reason is not None:
            self.dropped[reason] += 1
        self._forget(waiting)
        waiting.conn.close()
