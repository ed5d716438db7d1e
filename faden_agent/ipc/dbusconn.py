"""A small D-Bus connection over a unix socket: AUTH EXTERNAL, unix fd passing (SCM_RIGHTS),
method calls with a bounded wait, signals and incoming calls read when the socket is readable
(its fileno goes into a poller). Every failure is DbusError with one line; received fds are
owned by the caller of the message that carries them.
"""

from __future__ import annotations

import array
import os
import socket
import struct
import time
from collections import deque
from typing import Any

from faden_agent.ipc import dbuswire as wire
from faden_agent.ipc.dbusaddress import DbusError, socket_address, system_bus_address  # noqa: F401 - re-exported
from faden_agent.ipc.dbuswire import Message

BUS_NAME, BUS_PATH = "org.freedesktop.DBus", "/org/freedesktop/DBus"
MAX_FDS = 16  # per read
READ_BYTES = 65536


class BusTimeout(DbusError):
    pass


class Bus:
    def __init__(self, address: str, timeout_s: float = 2.0):
        self.timeout_s = timeout_s
        self._serial = 0
        self._buf = b""
        self._fds: deque[int] = deque()
        self.incoming: deque[Message] = deque()  # signals and calls read while waiting for a reply
        path = socket_address(address)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.sock.settimeout(timeout_s)
        try:
            self.sock.connect(path)
            self._authenticate()
            self.unique_name = self.call(BUS_NAME, BUS_PATH, BUS_NAME, "Hello").body[0]
        except OSError as exc:
            self.close()
            raise DbusError(f"cannot talk to the bus at {path.lstrip(chr(0))}: {exc.strerror or exc}") from None
        except DbusError:
            self.close()
            raise

    def fileno(self) -> int:
        return self.sock.fileno()

    def _authenticate(self) -> None:
        uid = str(os.geteuid()).encode().hex().encode()
        self.sock.sendall(b"\0AUTH EXTERNAL " + uid + b"\r\n")
        if not self._line().startswith(b"OK "):
            raise DbusError("the bus refused AUTH EXTERNAL")
        self.sock.sendall(b"NEGOTIATE_UNIX_FD\r\n")
        if self._line() != b"AGREE_UNIX_FD":
            raise DbusError("the bus does not pass unix fds")
        self.sock.sendall(b"BEGIN\r\n")

    def _line(self) -> bytes:
        data = b""
        while not data.endswith(b"\r\n"):
            chunk = self.sock.recv(1)
            if not chunk or len(data) > 512:
                raise DbusError("the bus closed the connection while authenticating")
            data += chunk
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
    ) -> Message:
        """A method call and its reply (within timeout_s); an ERROR reply is DbusError."""
        fields = {wire.PATH: path, wire.INTERFACE: interface, wire.MEMBER: member, wire.DESTINATION: destination}
        if signature:
            fields[wire.SIGNATURE] = signature
        serial = self.send(Message(wire.METHOD_CALL, fields=fields, body=list(body or []), fds=list(fds or [])))
        deadline = time.monotonic() + self.timeout_s
        while True:
            for message in self._read(deadline):
                if message.type in (wire.METHOD_RETURN, wire.ERROR) and message.fields.get(wire.REPLY_SERIAL) == serial:
                    if message.type == wire.ERROR:
                        close_fds(message)
                        name = message.fields.get(wire.ERROR_NAME)
                        text = message.body[0] if message.body and isinstance(message.body[0], str) else ""
                        raise DbusError(f"{interface}.{member}: {name}: {text}"[:300], name)
                    return message
                self.incoming.append(message)

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
        at_least_one False, only what is there now; DbusError when the bus hung up."""
        while True:
            messages = self._parse()
            if messages:
                return messages
            if not at_least_one:
                if not self._pending_data():
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
        try:
            return self._parse_whole()
        except (wire.WireError, struct.error, RecursionError) as exc:  # the stream cannot be followed any more
            raise DbusError(f"a malformed message from the bus: {exc}"[:300]) from None

    def _parse_whole(self) -> list[Message]:
        messages = []
        while (size := wire.message_size(self._buf)) is not None and size <= len(self._buf):
            message = wire.decode(self._buf[:size])
            self._buf = self._buf[size:]
            wanted = message.fields.get(wire.UNIX_FDS, 0)
            message.fds = [self._fds.popleft() for _ in range(min(wanted, len(self._fds)))]
            messages.append(message)
        return messages

    def close(self) -> None:
        while self._fds:
            os.close(self._fds.popleft())
        self.sock.close()


def close_fds(message: Message) -> None:
    for fd in message.fds:
        try:
            os.close(fd)
        except OSError:
            pass
    message.fds = []
