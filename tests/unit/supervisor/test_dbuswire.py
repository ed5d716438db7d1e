"""The D-Bus marshalling of ipc/dbuswire.py: what logind's calls need round-trips byte-exact,
and a hostile or broken message fails with WireError (DbusError on a connection), never with
another exception or a huge allocation."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from faden_agent.ipc import dbuswire as wire
from faden_agent.ipc.dbusconn import Bus, DbusError


def call(signature: str, body: list) -> wire.Message:
    fields = {wire.PATH: "/org/freedesktop/login1", wire.MEMBER: "Inhibit", wire.SIGNATURE: signature}
    return wire.Message(wire.METHOD_CALL, serial=7, fields=fields, body=body)


@pytest.mark.parametrize(
    ("signature", "body"),
    [
        ("ssss", ["shutdown", "faden-agent", "report the shutdown", "delay"]),
        ("v", [("t", 5_000_000)]),
        ("h", [0]),
        ("b", [True]),
        ("a{sv}", [{"a": ("s", "x"), "b": ("u", 3)}]),
        ("a(yv)", [[(1, ("o", "/x")), (5, ("u", 9))]]),
        ("yxtdn", [255, -(2**63), 2**64 - 1, 0.5, -2]),
        ("as", [[]]),
    ],
)
def test_round_trip(signature, body):
    data = wire.encode(call(signature, body))
    assert wire.message_size(data) == len(data) and len(data) % 8 in range(8)
    back = wire.decode(data)
    assert back.body == body and back.serial == 7 and back.member == "Inhibit"


def test_a_known_message_is_byte_exact():
    # Hello to the bus (serial 1); fields in code order: PATH 30 bytes (+2 padding), INTERFACE 29
    # (+3), MEMBER 14 (+2), DESTINATION 29: 109 bytes, the body starting at the next multiple of 8.
    fields = {
        wire.PATH: "/org/freedesktop/DBus",
        wire.DESTINATION: "org.freedesktop.DBus",
        wire.INTERFACE: "org.freedesktop.DBus",
        wire.MEMBER: "Hello",
    }
    data = wire.encode(wire.Message(wire.METHOD_CALL, serial=1, fields=fields))
    assert data[:16] == b"l\x01\x00\x01" + struct.pack("<III", 0, 1, 109)
    assert len(data) == 16 + 109 + 3  # the fields array padded to 8
    assert data[16:20] == b"\x01\x01o\x00" and data[20:24] == struct.pack("<I", 21)


@pytest.mark.parametrize(
    "breakage",
    [
        lambda d: b"B" + d[1:],  # marked big-endian, its sizes read so are absurd
        lambda d: d[:12] + struct.pack("<I", 2**31) + d[16:],  # a fields array of 2 GiB
        lambda d: d[:4] + struct.pack("<I", 2**31) + d[8:],  # a body of 2 GiB
    ],
)
def test_a_hostile_header_is_refused_before_anything_is_read(breakage):
    data = breakage(wire.encode(call("s", ["x"])))
    with pytest.raises(wire.WireError):
        wire.message_size(data)


def test_a_bad_signature_or_a_cut_body_fails_with_wire_error():
    with pytest.raises(wire.WireError, match="unknown type"):
        wire.split_types("s!")
    with pytest.raises(wire.WireError, match="not closed"):
        wire.split_types("(ss")
    data = wire.encode(call("s", ["a long enough string"]))
    cut = data[:-8] + struct.pack("<I", 999)[:0] + b"\0" * 8  # the string claims more than is there
    body_at = len(data) - len("a long enough string") - 5
    broken = cut[:body_at] + struct.pack("<I", 10_000) + cut[body_at + 4 :]
    with pytest.raises(wire.WireError):
        wire.decode(broken)


def test_a_connection_that_sends_garbage_fails_with_one_line(tmp_path):
    path = str(tmp_path / "bus")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        conn.recv(4096)
        conn.sendall(b"OK 0123\r\n")
        conn.recv(4096)
        conn.sendall(b"AGREE_UNIX_FD\r\n")
        got = b""
        while b"Hello" not in got:  # BEGIN, then the Hello call
            got += conn.recv(4096)
        conn.sendall(b"l\x02\x00\x01" + b"\xff" * 60)  # a reply of absurd sizes
        time.sleep(1)
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    with pytest.raises(DbusError, match="malformed|over"):
        Bus(f"unix:path={path}", timeout_s=2)
    thread.join(2)
    server.close()


def test_no_bus_is_one_line(tmp_path):
    with pytest.raises(DbusError, match="cannot talk to the bus"):
        Bus(f"unix:path={tmp_path / 'none'}", timeout_s=1)
    with pytest.raises(DbusError, match="no unix socket"):
        Bus("tcp:host=127.0.0.1,port=1")
