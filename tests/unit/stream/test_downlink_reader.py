"""The downlink read incrementally whatever the framing: a real client on a real
socket, the server holding the connection open: an answer with Content-Length or none
(close-delimited) is not read whole before its first line is looked at (then commands would
arrive only when the connection closed, and memory would grow with the answer)."""

from __future__ import annotations

import os

import orjson
import pytest

from faden_agent.backend.client import MAX_STREAM_LINE, BackendClient, ProtocolError
from faden_agent.config import load_config
from faden_agent.workers.stream.downlink import parse_command
from tests.support.scriptedhttp import StreamingHTTP

FRAMINGS = [
    ("chunked", False),
    ("length", False),
    ("close", False),
    ("chunked", True),
    ("length", True),
    ("close", True),
]


def command(command_id: str, seq: int, **extra) -> bytes:
    return orjson.dumps({"type": "command", "id": command_id, "seq": seq, "kind": "no.such.kind", "spec": {}, **extra})


@pytest.fixture
def client_for(tmp_path):
    made = []

    def make(server: StreamingHTTP) -> BackendClient:
        config = load_config(
            {"FADEN_NODE_AGENT_BACKEND_URL": server.url, "FADEN_NODE_AGENT_STATE_PATH": str(tmp_path / "state.json")}
        )
        client = BackendClient(config, "cred")
        made.append((client, server))
        return client

    yield make
    for client, server in made:
        server.close()
        client.close()


def next_command(stream) -> dict:
    for message in stream:
        if message["type"] == "command":
            return message
    raise AssertionError("the stream ended")


@pytest.mark.parametrize("framing, gzip", FRAMINGS)
def test_each_command_arrives_while_the_connection_stays_open(client_for, framing, gzip):
    server = StreamingHTTP(framing, gzip)
    stream = iter(client_for(server).open_stream(0, 5.0))
    for seq in (1, 2, 3):
        server.put(command(f"c-{seq}", seq))
        got = next_command(stream)
        assert got["id"] == f"c-{seq}"
        assert server.streams_open == 1  # the answer has not ended: the line was read as it came


@pytest.mark.parametrize("framing, gzip", FRAMINGS)
def test_an_over_size_line_is_skipped_named_by_its_beginning_and_the_next_command_arrives(client_for, framing, gzip):
    """The line is not held; its first bytes name the command, which comes out as a short
    too_large command (the executor ends it rejected), then the next command."""
    server = StreamingHTTP(framing, gzip)
    stream = iter(client_for(server).open_stream(0, 5.0))
    big = command("c-big", 1, spec={"x": os.urandom(MAX_STREAM_LINE).hex()})  # incompressible: no bomb
    server.put(big)
    server.put(b'{"spec": {"id": "nested"}, "x": "' + b"y" * MAX_STREAM_LINE + b'", "type": "command"}')  # no id first
    server.put(command("c-next", 2))
    over_cap = next_command(stream)
    assert over_cap == {"type": "command", "id": "c-big", "seq": 1, "kind": "no.such.kind", "too_large": len(big)}
    handed = parse_command(over_cap)  # what the executor gets: no spec, the line's size
    assert handed["spec"] is None and handed["too_large"] == len(big)
    assert next_command(stream)["id"] == "c-next"
    assert server.streams_open == 1


def test_a_gzip_bomb_is_refused(client_for):
    server = StreamingHTTP("chunked", gzip=True)
    stream = iter(client_for(server).open_stream(0, 5.0))
    server.put(b"\n" * (256 * 1024 * 1024))  # ~256 KiB on the wire
    with pytest.raises(ProtocolError, match="gzip bomb"):
        next_command(stream)


def test_an_unknown_content_encoding_is_refused(client_for):
    server = StreamingHTTP("length")
    original = server.httpd.RequestHandlerClass.send_header

    def send_header(self, name, value):
        original(self, name, value)
        if name == "Content-Type":
            original(self, "Content-Encoding", "zstd-from-the-future")

    server.httpd.RequestHandlerClass.send_header = send_header
    with pytest.raises(ProtocolError, match="Content-Encoding"):
        next_command(iter(client_for(server).open_stream(0, 5.0)))
