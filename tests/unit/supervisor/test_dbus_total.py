"""The D-Bus client is total (ipc/dbuswire.py, dbusconn.py): any bytes, signature or header
fields give a Message or WireError and nothing else, fast (no loop on `a()`/`a{}`); big-endian
messages are read; AUTH has one deadline however slowly the bus drips; no received fd is kept
that was not asked for (each passed fd is a pipe's read end: its write end says when every copy
is closed), a malformed message is dropped, not fatal."""

from __future__ import annotations

import array
import os
import socket
import struct
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faden_agent.ipc import dbuswire as wire
from faden_agent.ipc.dbusconn import Bus, DbusError

SIGNATURE_CHARS = "ybnqiuxtdhsogva(){}!"


def reader_open(write_end: int) -> bool:
    """Whether any copy of the pipe's read end is still open (in this process: the client's)."""
    try:
        os.write(write_end, b"x")
    except BrokenPipeError:
        return False
    return True


def message(signature: str, body: list, serial: int = 7, extra: dict | None = None) -> wire.Message:
    base = {wire.PATH: "/x", wire.MEMBER: "M", wire.INTERFACE: "i.x"}
    if signature:
        base[wire.SIGNATURE] = signature
    return wire.Message(wire.SIGNAL, serial=serial, fields={**base, **(extra or {})}, body=body)


def with_signature(data: bytes, signature: str, body: bytes) -> bytes:
    """A little-endian signal whose header claims `signature`, followed by the raw `body`."""
    head = wire.encode(message("", []))
    fields_len = struct.unpack_from("<I", head, 12)[0]
    sig_field = struct.pack("<BBBB", wire.SIGNATURE, 1, ord("g"), 0) + bytes([len(signature)]) + signature.encode()
    fields = head[16 : 16 + fields_len]
    fields += b"\0" * (-len(fields) % 8) + sig_field + b"\0"
    out = bytearray(head[:12] + struct.pack("<I", len(fields)) + fields)
    out += b"\0" * (-len(out) % 8)
    struct.pack_into("<I", out, 4, len(body))
    return bytes(out) + body


@pytest.mark.parametrize(
    "signature", ["a()", "a{}", "a{vs}", "{ss}", "a{sss}", "()", "a" * 40 + "y", "(" * 40 + "y" + ")" * 40]
)
def test_signatures_the_spec_refuses_are_refused(signature):
    with pytest.raises(wire.WireError):
        wire.split_types(signature)


@pytest.mark.parametrize("signature", ["a()", "a{}", "a(())"])
def test_an_array_of_empty_structs_ends_at_once(signature):
    data = with_signature(b"", signature, struct.pack("<I", 64) + b"\0" * 68)
    started = time.monotonic()
    with pytest.raises(wire.WireError):
        wire.decode(data)
    assert time.monotonic() - started < 0.5


@settings(max_examples=400, deadline=1000)
@given(st.text(alphabet=SIGNATURE_CHARS, max_size=80))
def test_any_signature_splits_or_is_refused(signature):
    try:
        parts = wire.split_types(signature)
    except wire.WireError:
        return
    assert "".join(parts) == signature


@settings(max_examples=400, deadline=1000)
@given(st.text(alphabet=SIGNATURE_CHARS, min_size=1, max_size=12), st.binary(max_size=256))
def test_any_body_under_any_signature_decodes_or_is_wire_error(signature, body):
    try:
        wire.decode(with_signature(b"", signature, body))
    except wire.WireError:
        pass


VALID = [
    wire.encode(message("ssss", ["shutdown", "faden-agent", "why", "delay"])),
    wire.encode(message("a{sv}", [{"a": ("s", "x"), "b": ("av", [("u", 3)])}])),
    wire.encode(message("v", [("t", 5)]), order=">"),
    wire.encode(message("b", [True], extra={wire.SENDER: ":1.2", wire.DESTINATION: ":1.3"})),
]


@settings(max_examples=800, deadline=1000)
@given(
    st.sampled_from(VALID),
    st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=6),
    st.integers(0, 400),
)
def test_mutated_messages_decode_or_are_wire_error(data, flips, cut):
    mutated = bytearray(data)
    for at, value in flips:
        if at < len(mutated):
            mutated[at] = value
    mutated = mutated[: max(16, len(mutated) - cut)] if cut % 3 == 0 else mutated
    try:
        size = wire.message_size(bytes(mutated))
        if size is not None and size <= len(mutated):
            wire.decode(bytes(mutated[:size]))
    except wire.WireError:
        pass


def test_a_header_field_of_the_wrong_type_is_wire_error():
    data = wire.encode(message("s", ["x"]))
    at = data.index(b"\x08\x01g\x00")  # SIGNATURE, a 'g': make it claim a 'u'
    broken = data[:at] + b"\x08\x01u\x00" + data[at + 4 :]
    with pytest.raises(wire.WireError):
        wire.decode(broken)


def test_big_endian_round_trips():
    sent = message("a{sv}b", [{"k": ("t", 2**40)}, True], serial=9)
    back = wire.decode(wire.encode(sent, order=">"))
    assert back.body == sent.body and back.serial == 9 and back.member == "M"


class FakeBus:
    """A unix socket that speaks as much of a bus as a test needs, then `script(conn)`."""

    def __init__(self, tmp_path, script, auth_drip_s: float = 0.0):
        self.path = str(tmp_path / "bus")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(1)
        self.script, self.auth_drip_s = script, auth_drip_s
        self.done = threading.Event()  # the script has sent all it sends
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"unix:path={self.path}"

    def serve(self) -> None:
        conn, _ = self.server.accept()
        try:
            conn.recv(4096)
            for byte in b"OK 0123456789abcdef\r\n":
                conn.sendall(bytes([byte]))
                time.sleep(self.auth_drip_s)
            conn.recv(4096)
            conn.sendall(b"AGREE_UNIX_FD\r\n")
            got = b""
            while b"Hello" not in got:
                got += conn.recv(4096)
            fields = {wire.REPLY_SERIAL: 1, wire.DESTINATION: ":1.9"}
            conn.sendall(
                wire.encode(wire.Message(wire.METHOD_RETURN, 1, fields={**fields, wire.SIGNATURE: "s"}, body=[":1.9"]))
            )
            self.script(conn)
            self.done.set()
        except OSError:
            pass
        finally:
            time.sleep(0.5)
            conn.close()

    def close(self) -> None:
        self.thread.join(5)
        self.server.close()


def send_with_fds(conn: socket.socket, data: bytes, count: int) -> list[int]:
    """Send `data` with `count` pipes' read ends; their write ends (kept) tell when the copies close."""
    pipes = [os.pipe() for _ in range(count)]
    conn.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [r for r, _ in pipes]))])
    for r, _ in pipes:
        os.close(r)
    return [w for _, w in pipes]


def reply(serial: int, signature: str, body: list, fds: int = 0) -> bytes:
    fields = {wire.REPLY_SERIAL: serial, wire.SIGNATURE: signature}
    if fds:
        fields[wire.UNIX_FDS] = fds
    return wire.encode(wire.Message(wire.METHOD_RETURN, serial + 100, fields=fields, body=body))


def test_auth_has_one_deadline_however_slowly_the_bus_drips(tmp_path):
    fake = FakeBus(tmp_path, lambda conn: None, auth_drip_s=0.3)  # 21 bytes: 6.3 s in all
    started = time.monotonic()
    with pytest.raises(DbusError, match="AUTH within 1s"):
        Bus(fake.address, timeout_s=1.0)
    took = time.monotonic() - started
    fake.close()
    assert took < 3.0, took  # the drip alone takes 6.3 s: one deadline ended it


def test_fds_not_asked_for_are_closed_and_asked_ones_kept(tmp_path):
    unwanted: list[int] = []
    wanted: list[int] = []

    def script(conn: socket.socket) -> None:
        for serial, asks in ((2, False), (3, True)):
            got = b""
            while b"Get" not in got and b"Inhibit" not in got:
                got += conn.recv(4096)
            # a signal that carries fds, and a message that cannot be decoded, with fds
            unwanted.extend(send_with_fds(conn, wire.encode(message("h", [0], 50 + serial, {wire.UNIX_FDS: 2})), 2))
            unwanted.extend(send_with_fds(conn, b"l\x04\x00\x01" + struct.pack("<III", 0, 60 + serial, 0), 3))
            answer = reply(serial, "h", [0], fds=1 if asks else 0)
            (wanted if asks else unwanted).extend(send_with_fds(conn, answer, 1 if asks else 16))

    fake = FakeBus(tmp_path, script)
    bus = Bus(fake.address, timeout_s=2.0)
    try:
        assert bus.call("x.y", "/x", "x.y", "Get").fds == []  # a reply with 16 fds nobody asked for
        second = bus.call("x.y", "/x", "x.y", "Inhibit", want_fds=True)
        assert fake.done.wait(5)  # the lists of what it sent are whole
        assert len(second.fds) == 1 and reader_open(wanted[0])
        os.close(second.fds[0])
        assert not reader_open(wanted[0])
        signals = bus.receive(0.5)
        assert all(m.fds == [] for m in signals)
        assert len(unwanted) == 2 * (2 + 3) + 16 and not any(reader_open(w) for w in unwanted)
        assert bus.dropped == 2  # the undecodable ones, dropped without ending the connection
    finally:
        bus.close()
        fake.close()
        for w in unwanted + wanted:
            os.close(w)


def test_a_bus_that_never_stops_sending_does_not_hold_a_non_waiting_read(tmp_path):
    stop = threading.Event()

    def script(conn: socket.socket) -> None:
        partial = wire.encode(message("s", ["x" * 1000]))
        conn.sendall(partial[:16])
        while not stop.is_set():  # a message that never completes, one byte at a time
            conn.sendall(b"\0")
            time.sleep(0.001)

    fake = FakeBus(tmp_path, script)
    bus = Bus(fake.address, timeout_s=0.5)
    started = time.monotonic()
    assert bus.receive(0) == []
    took = time.monotonic() - started
    stop.set()
    bus.close()
    fake.close()
    assert took < 3.0, took  # endless without a bound: the sender never stops on its own
