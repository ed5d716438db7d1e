"""Property tests over downlink stream lines, read by the real client from a real socket:
every line is either a message of the documented shape (and a command either a correct
hand-off body or a clean skip) or ends the stream with a BackendError naming the line;
nothing else is raised out of the parser."""

from __future__ import annotations

import socket
import threading
import time

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faden_agent.backend.client import BackendClient, BackendError, BackendUnavailable, DownlinkStream, ProtocolError
from faden_agent.config import load_config
from faden_agent.workers.stream.downlink import parse_command
from tests.support.fuzzvalues import json_values

U64 = 2**64 - 1
seqs = st.integers(-(2**63), U64) | st.sampled_from([0, -1, 1, 2**63 - 1, 2**63, U64, 1.0, 1.5, "7", True, None, [1]])
ids = st.text(max_size=10) | st.sampled_from(["", " ", "c-1", "c-1"]) | json_values  # duplicates on purpose
kinds = st.sampled_from(["container.run", "image.pull", "command.cancel", "", "no.such.kind"]) | json_values
deadlines = (
    st.none() | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([True, "soon", -1, 0]) | json_values
)
commands = st.fixed_dictionaries(
    {"type": st.just("command")},
    optional={"id": ids, "seq": seqs, "kind": kinds, "spec": json_values, "deadline": deadlines},
)
others = st.one_of(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["keepalive", "hello", "future.thing", ""])},
        optional={"ts": json_values, "junk": json_values, "node_id": json_values},
    ),
    st.dictionaries(st.text(max_size=6), json_values, max_size=3),  # often without "type"
    st.fixed_dictionaries({"type": json_values}),  # a type that is not a string
    json_values,  # not an object at all
)
good_lines = (commands | others).map(orjson.dumps)
bad_lines = st.one_of(
    good_lines.flatmap(lambda line: st.integers(1, max(1, len(line) - 1)).map(lambda cut: line[:cut])),  # truncated
    st.binary(max_size=30),
    st.sampled_from(
        [
            b"\xff\xfe",
            b'{"type": "keepalive", "ts": "\xc3\x28"}',
            b"{'type': 'command'}",
            b"NaN",
            b'{"type": "command", "seq": 1e400}',
            b'{"type": "keepalive"} trailing',
        ]
    ),
)
lines = st.lists(good_lines | bad_lines, max_size=8)


def expected(line: bytes):
    """What the stream must yield for one non-empty line; None where it must end the stream."""
    try:
        message = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return message if isinstance(message, dict) and isinstance(message.get("type"), str) else None


def check_command(message: dict) -> None:
    well_formed = (
        isinstance(message.get("id"), str)
        and message["id"].strip() != ""
        and len(message["id"].encode()) <= 256
        and isinstance(message.get("kind"), str)
        and type(message.get("seq")) is int
        and 0 < message["seq"] < 2**63
        and (message.get("deadline") is None or type(message["deadline"]) in (int, float))
    )
    if not well_formed:
        with pytest.raises(ValueError) as refused:
            parse_command(message)
        assert "\n" not in str(refused.value) and len(str(refused.value)) < 300
        return
    command = parse_command(message)
    assert command == {
        "id": message["id"],
        "seq": message["seq"],
        "kind": message["kind"],
        "spec": message.get("spec"),
        "deadline": message.get("deadline"),
    }
    orjson.dumps(command)  # travels on to the executor as JSON


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stream_lines=lines, final_newline=st.booleans())
def test_each_line_is_a_message_a_skip_or_a_clean_end(scripted_http, scripted_client, stream_lines, final_newline):
    scripted_http.answer(
        200, b"\n".join(stream_lines) + (b"\n" if final_newline else b""), {"Content-Type": "application/x-ndjson"}
    )
    received = []
    with pytest.raises(BackendError) as ended:
        for message in scripted_client.open_stream(0, 1.0):
            received.append(message)
            if message["type"] == "command":
                check_command(message)
    # The messages are exactly the lines up to the first bad one; a bad line ends it as a ProtocolError.
    want = []
    for line in stream_lines:
        if not line.strip():
            continue  # empty lines are skipped (and b" " is not JSON but also not a line worth a reconnect)
        message = expected(line)
        if message is None:
            break
        want.append(message)
    assert received == want
    if isinstance(ended.value, ProtocolError):
        assert "\n" not in str(ended.value)
    else:
        assert type(ended.value) is BackendUnavailable and "ended" in str(ended.value)


@settings(max_examples=300, deadline=None)
@given(message=commands)
def test_command_fields_are_checked_without_raising(message):
    check_command(message)


def test_an_endless_line_is_refused_before_it_ends(tmp_path):
    """A server streaming one endless line: skipped unbuffered past MAX_STREAM_LINE, and
    refused once it runs past MAX_SKIP_BYTES, not after waiting for a newline that never comes."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b"100000\r\n" + b"x" * (1 << 20) + b"\r\n"  # chunked, as docs/protocol.md requires
            sent = 0
            try:
                while not stop.is_set() and sent <= 2 * DownlinkStream.MAX_SKIP_BYTES:
                    conn.sendall(chunk)
                    sent += 1 << 20
            except OSError:
                return  # the client hung up: what we want
            stop.wait(30)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    config = load_config(
        {
            "FADEN_NODE_AGENT_BACKEND_URL": f"http://127.0.0.1:{listener.getsockname()[1]}",
            "FADEN_NODE_AGENT_STATE_PATH": str(tmp_path / "state.json"),
        }
    )
    client = BackendClient(config, "c")
    started = time.monotonic()
    try:
        with pytest.raises(ProtocolError, match="runs on past"):
            list(client.open_stream(0, 10.0))  # read timeout 31 s: only the size check can end it early
        assert time.monotonic() - started < 20
    finally:
        stop.set()
        client.close()
        listener.close()
