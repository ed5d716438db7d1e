"""The peer wire's chunked reader over a real TCP connection: a peer that goes away at any
point of a chunk is a stream that broke (after how many bytes); only bytes that break the
framing are a malformed chunk."""

from __future__ import annotations

import socket
import struct

import pytest

from faden_agent.transfers import wire

CHUNKED = {"transfer-encoding": "chunked"}
WHOLE = b"5\r\nhello\r\n6;name=x\r\n world\r\n0\r\n\r\n"


def read_after(sent: bytes, *, reset: bool = False) -> tuple[bytes, str | None]:
    """What the reader makes of a chunked body of which the peer sent `sent`, then closed the
    connection (reset=True: an RST, as a killed process with unread data leaves)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        reader = socket.create_connection(server.getsockname(), timeout=5)
        peer, _ = server.accept()
        peer.sendall(sent)
        if reset:
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()
        received, failure = b"", None
        try:
            for piece in wire.body(reader.makefile("rb"), CHUNKED, "holder"):
                received += piece
        except wire.PeerFailure as exc:
            failure = f"{exc.reason}: {exc}"
        finally:
            reader.close()
    return received, failure


def test_a_whole_chunked_body_is_read_with_its_extensions_ignored():
    assert read_after(WHOLE) == (b"hello world", None)


@pytest.mark.parametrize(
    ("sent", "received", "where"),
    [
        (b"", 0, "before a chunk's size"),
        (b"5\r\nhello\r\n", 5, "before a chunk's size"),
        (b"5\r\nhello\r\n6;na", 5, "inside a chunk's size line"),
        (b"5\r\nhello\r\n6\r\n wo", 8, "inside a chunk's data"),
        (b"5\r\nhello", 5, "before a chunk's CRLF"),
        (b"5\r\nhello\r", 5, "before a chunk's CRLF"),
    ],
    ids=[
        "before the first size line",
        "before a size line",
        "inside the size line",
        "inside the data",
        "before the CRLF",
        "inside the CRLF",
    ],
)
def test_an_end_at_any_point_of_a_chunk_is_a_stream_that_broke(sent, received, where):
    body, failure = read_after(sent)
    assert len(body) == received
    assert failure == f"peer_failed: the stream from peer holder broke after {received} bytes {where}"


def test_a_reset_inside_the_data_is_a_stream_that_broke_too():
    body, failure = read_after(b"5\r\nhello\r\n100000\r\n" + b"x" * 1000, reset=True)
    assert failure == f"peer_failed: the stream from peer holder broke after {len(body)} bytes (ConnectionResetError)"


@pytest.mark.parametrize(
    ("sent", "shown"),
    [
        (b"5\r\nhello\r\nzz\r\n", b"zz\r\n"),
        (b"5\r\nhello\r\n-5\r\nxxxxx\r\n", b"-5\r\n"),
        (b"5\r\nhello\r\n0x5\r\nxxxxx\r\n", b"0x5\r\n"),
        (b"5\r\nhello\r\n" + b"f" * 200, b"f" * 40),
        (b"5\r\nhelloXY6\r\n world\r\n0\r\n\r\n", b"XY"),
    ],
    ids=["not hex", "negative", "0x prefix", "endless size line", "no CRLF after the data"],
)
def test_bytes_that_break_the_framing_are_a_malformed_chunk(sent, shown):
    body, failure = read_after(sent)
    assert body == b"hello"
    assert failure == f"peer_failed: peer holder sent a malformed chunk after 5 bytes: {shown!r}"
