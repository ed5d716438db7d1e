"""A small D-Bus connection over a unix socket: AUTH EXTERNAL within one deadline, unix fd
passing (SCM_RIGHTS), method calls with a bounded wait, signals and incoming calls read when the
socket is readable (its fileno goes into a poller). Every failure is DbusError with one line; a
malformed message is dropped (counted); fds are kept only on the reply of a call that asked for
them (its caller owns them), every other received fd is closed at once."""

from __future__ import annotations

import array
import os
import socket
import time
from collections import deque
from typing import Any

from faden_agent.ipc import dbuswire as wire
from faden_agent.ipc.dbuswire import Message

SYSTEM_BUS = "unix:path=/run/dbus/system_bus_socket"
BUS_NAME, BUS_PATH = "org.freedesktop.DBus", "/org/freedesktop/DBus"
MAX_FDS = 16  # per read
READ_BYTES = 65536


class DbusError(Exception):
    def __init__(self, message: str, name: str | None = None):
        super().__init__(message)
        self.name = name  # the D-Bus error name of an ERROR reply


class BusTimeout(DbusError):
    pass


def system_bus_address() -> str:
    """DBUS_SYSTEM_BUS_ADDRESS (the variable libdbus and sd-bus read), else the standard socket."""
    return os.environ.get("DBUS_SYSTEM_BUS_ADDRESS") or SYSTEM_BUS


def socket_address(address: str) -> str:
    """The unix socket of the first usable `unix:path=` or `unix:abstract=` entry."""
    for entry in address.split(";"):
        kind, _, params = entry.partition(":")
        values = dict(p.split("=", 1) for p in params.split(",") if "=" in p)
        if kind == "unix" and "path" in values:
            return values["path"]
        if kind == "unix" and "abstract" in values:
            return "\0" + values["abstract"]
    raise DbusError(f"no unix socket in the bus address {address[:200]!r}")


class Bus:
    def __init__(self, address: str, timeout_s: float = 2.0):
        self.timeout_s = timeout_s
        self._serial = 0
        self._buf = b""
        self._fds: deque[int] = deque()
        self._wants_fds: set[int] = set()  # serials of calls whose reply may keep its fds
        self.incoming: deque[Message] = deque()  # signals and calls read while waiting for a reply
        self.dropped = 0  # malformed messages skipped
        path = socket_address(address)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        deadline = time.monotonic() + timeout_s  # connect, AUTH and Hello together
        try:
            self.sock.settimeout(timeout_s)
            self.sock.connect(path)
            self._authenticate(deadline)
            hello = self.call(BUS_NAME, BUS_PATH, BUS_NAME, "Hello", deadline=deadline)
            if hello.signature != "s":
                raise DbusError(f"the bus answered Hello with {hello.signature[:40]!r}, not a name")
            self.unique_name: str = hello.body[0]
        except OSError as exc:
            self.close()
            raise DbusError(f"cannot talk to the bus at {path.lstrip(chr(0))}: {exc.strerror or exc}") from None
        except DbusError:
            self.close()
            raise

    def fileno(self) -> int:
        return self.sock.fileno()

    def _authenticate(self, deadline: float) -> None:
        uid = str(os.geteuid()).encode().hex().encode()
        self.sock.sendall(b"\0AUTH EXTERNAL " + uid + b"\r\n")
        if not self._line(deadline).startswith(b"OK "):
            raise DbusError("the bus refused AUTH EXTERNAL")
        self.sock.sendall(b"NEGOTIATE_UNIX_FD\r\n")
        if self._line(deadline) != b"AGREE_UNIX_FD":
            raise DbusError("the bus does not pass unix fds")
        self.sock.sendall(b"BEGIN\r\n")

    def _line(self, deadline: float) -> bytes:
        """One AUTH line, before the deadline. The bus says nothing until asked, so a line is
        all there is to read; anything after it is a broken bus."""
        data = b""
        while not data.endswith(b"\r\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise BusTimeout(f"the bus did not finish AUTH within {self.timeout_s:g}s")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(512)
            except TimeoutError:
                continue
            data += chunk
            if not chunk or len(data) > 512 or b"\r\n" in data[:-2]:
                raise DbusError("the bus closed the connection or sent nonsense while authenticating")
        return data[:-2]

    def send(self, message: Message) -> int:
        """Send a message (its serial assigned here); the serial."""
        self._serial += 1
        message.serial = self._serial
        data = wire.encode(message)
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", message.fds))] if message.fds else []
        try:
            sent = self.sock.sendmsg([data], ancillary)
            if sent < len(data):
                self.sock.sendall(data[sent:])
        except OSError as exc:
            raise DbusError(f"cannot send to the bus: {exc.strerror or exc}") from None
        return message.serial

    def call(
        self,
        destination: str,
        path: str,
        interface: str,
        member: str,
        signature: str = "",
        body: list[Any] | None = None,
        fds: list[int] | None = None,
        want_fds: bool = False,
        deadline: float | None = None,
    ) -> Message:
        """A method call and its reply (within timeout_s, or by `deadline`); an ERROR reply is
        DbusError. The reply keeps the fds it carries only with want_fds (then the caller's)."""
        fields = {wire.PATH: path, wire.INTERFACE: interface, wire.MEMBER: member, wire.DESTINATION: destination}
        if signature:
            fields[wire.SIGNATURE] = signature
        serial = self.send(Message(wire.METHOD_CALL, fields=fields, body=list(body or []), fds=list(fds or [])))
        if want_fds:
            self._wants_fds.add(serial)
        deadline = deadline if deadline is not None else time.monotonic() + self.timeout_s
        try:
            while True:
                for message in self._read(deadline):
                    answers = message.type in (wire.METHOD_RETURN, wire.ERROR)
                    if answers and message.fields.get(wire.REPLY_SERIAL) == serial:
                        if message.type == wire.ERROR:
                            close_fds(message)
                            name = message.fields.get(wire.ERROR_NAME)
                            text = message.body[0] if message.body and isinstance(message.body[0], str) else ""
                            raise DbusError(f"{interface}.{member}: {name}: {text}"[:300], name)
                        return message
                    self.incoming.append(message)
        finally:
            self._wants_fds.discard(serial)

    def add_match(self, rule: str) -> None:
        self.call(BUS_NAME, BUS_PATH, BUS_NAME, "AddMatch", "s", [rule])

    def reply(
        self, call: Message, signature: str = "", body: list[Any] | None = None, fds: list[int] | None = None
    ) -> None:
        fields: dict[int, Any] = {wire.REPLY_SERIAL: call.serial}
        if call.fields.get(wire.SENDER):
            fields[wire.DESTINATION] = call.fields[wire.SENDER]
        if signature:
            fields[wire.SIGNATURE] = signature
        self.send(Message(wire.METHOD_RETURN, fields=fields, body=list(body or []), fds=list(fds or [])))

    def signal(
        self, path: str, interface: str, member: str, signature: str = "", body: list[Any] | None = None
    ) -> None:
        fields = {wire.PATH: path, wire.INTERFACE: interface, wire.MEMBER: member}
        if signature:
            fields[wire.SIGNATURE] = signature
        self.send(Message(wire.SIGNAL, fields=fields, body=list(body or [])))

    def receive(self, wait_s: float = 0.0) -> list[Message]:
        """What came (signals, calls), reading at most until `wait_s` passed; [] when nothing did."""
        out = list(self.incoming)
        self.incoming.clear()
        if not out:
            try:
                out = self._read(time.monotonic() + wait_s, at_least_one=wait_s > 0)
            except BusTimeout:
                return []
        return out

    def _read(self, deadline: float, at_least_one: bool = True) -> list[Message]:
        """Whole messages: waiting until `deadline` for one (DbusError past it), or, with
        at_least_one False, only what is there now (reading on for at most timeout_s while a
        message is incomplete); DbusError when the bus hung up."""
        stop_reading_at = time.monotonic() + self.timeout_s
        while True:
            messages = self._parse()
            if messages:
                return messages
            if not at_least_one:
                if time.monotonic() >= stop_reading_at or not self._pending_data():
                    return []
                self._recv(self.timeout_s)  # data waits: it does not block
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                raise BusTimeout(f"no answer from the bus within {self.timeout_s:g}s")
            self._recv(left)

    def _recv(self, timeout_s: float) -> None:
        self.sock.settimeout(timeout_s)
        try:
            data, ancillary, _, _ = self.sock.recvmsg(READ_BYTES, socket.CMSG_SPACE(MAX_FDS * 4))
        except TimeoutError:
            return
        except OSError as exc:
            raise DbusError(f"the bus connection failed: {exc.strerror or exc}") from None
        if not data:
            raise DbusError("the bus closed the connection")
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
                self._fds.extend(fds)
        while len(self._fds) > MAX_FDS:  # more than one message of ours may carry: not asked for
            os.close(self._fds.pop())
        self._buf += data

    def _pending_data(self) -> bool:
        self.sock.settimeout(0)
        try:
            self.sock.recv(1, socket.MSG_PEEK)  # b"" at EOF: the read that follows reports it
            return True
        except BlockingIOError:
            return False
        except OSError:
            return True  # the read that follows reports it
        finally:
            self.sock.settimeout(self.timeout_s)

    def _parse(self) -> list[Message]:
        """The whole messages in the buffer. A malformed one is dropped with its fds; a header
        that cannot be framed is DbusError (the stream cannot be followed any more)."""
        messages = []
        while True:
            try:
                size = wire.message_size(self._buf)
            except wire.WireError as exc:
                raise DbusError(f"a malformed message from the bus: {exc}"[:300]) from None
            if size is None or size > len(self._buf):
                break
            raw, self._buf = self._buf[:size], self._buf[size:]
            try:
                message: Message | None = wire.decode(raw)
            except wire.WireError:
                message, self.dropped = None, self.dropped + 1
            fds = self._take_fds(message)
            if message is not None:
                message.fds = fds
                messages.append(message)
            else:
                _close_all(fds)
        if not self._buf:  # nothing half-read that could still claim them
            _close_all(self._fds)
            self._fds.clear()
        return messages

    def _take_fds(self, message: Message | None) -> list[int]:
        """The fds a message declares (the bus sends them with its first bytes), kept only on
        the reply to a call that wants them; [] for every other message, its fds closed."""
        wanted = message.fields.get(wire.UNIX_FDS, 0) if message is not None else len(self._fds)
        fds = [self._fds.popleft() for _ in range(min(wanted, len(self._fds)))]
        if message is not None and message.fields.get(wire.REPLY_SERIAL) in self._wants_fds and len(fds) == wanted:
            return fds
        _close_all(fds)
        return []

    def close(self) -> None:
        while self._fds:
            os.close(self._fds.popleft())
        self.sock.close()


def close_fds(message: Message) -> None:
    _close_all(message.fds)
    message.fds = []


def _close_all(fds: Any) -> None:
    for fd in list(fds):
        try:
            os.close(fd)
        except OSError:
            pass
