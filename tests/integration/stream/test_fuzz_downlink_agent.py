"""A real agent on a downlink full of garbage (fuzzing): a small backend in the test
(stdlib HTTP on 127.0.0.1) speaks docs/protocol.md for enroll, uplink and the stream, but
the stream carries a seeded list of nasty lines among valid commands. The stream worker must
not crash-loop, heartbeats must keep arriving, and every valid command must still reach the
executor (its terminal timeline record arrives), while malformed command lines never do.

Like a real backend, commands are sent again on every connection after the agent's cursor
(so a command behind a line that broke the connection comes back); each garbage line is sent
once, so the run ends."""

from __future__ import annotations

import itertools
import random
import threading
import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlparse

import orjson
import pytest

from faden_agent import protocol
from faden_agent.backend.client import MAX_STREAM_LINE
from tests.support.agentproc import AgentProcess, agent_env, wait_for
from tests.support.scriptedhttp import LocalHTTP, reply_json

SEED = 8
U64 = 2**64 - 1


def command(command_id: str, seq, kind: str, spec, **extra) -> bytes:
    return orjson.dumps({"type": "command", "id": command_id, "seq": seq, "kind": kind, "spec": spec, **extra})


# id -> (state, reason) the executor must report; sent in seq order among the garbage.
EXPECTED = {
    "fz-1": (protocol.REJECTED, "unknown_kind"),
    "fz-2": (protocol.REJECTED, "invalid_spec"),  # healthcheck 1e300 s: raised out of validate once
    "fz-3": (protocol.REJECTED, "invalid_spec"),
    "fz-4": (protocol.FAILED, "not_found"),  # cancel of a command that does not exist
    "fz-5": (protocol.REJECTED, "policy_denied"),  # the host policy refuses privileged
    "fz-last": (protocol.REJECTED, "unknown_kind"),  # the largest seq there is (int64)
}
VALID = [
    (1, command("fz-1", 1, "no.such.kind", {})),
    (
        2,
        command(
            "fz-2",
            2,
            "container.run",
            {"name": "fz", "image": "x", "healthcheck": {"test": ["CMD", "true"], "interval_s": 1e300}},
        ),
    ),
    (3, command("fz-1", 3, "no.such.kind", {"again": True})),  # a duplicate id: never run twice
    (4, command("fz-3", 4, "container.stop", "not an object")),
    (5, command("fz-4", 5, "command.cancel", {"command_id": "no-such-command"})),
    (6, command("fz-5", 6, "container.run", {"name": "a", "image": "b", "privileged": True})),
    (2**63 - 1, command("fz-last", 2**63 - 1, "no.such.kind", None, deadline=None)),
]
# Command lines that must be skipped: none of these ids may ever reach the executor.
SKIPPED = {
    "sk-neg": command("sk-neg", -5, "no.such.kind", {}),
    "sk-zero": command("sk-zero", 0, "no.such.kind", {}),
    "sk-str": command("sk-str", "7", "no.such.kind", {}),
    "sk-float": command("sk-float", 2.5, "no.such.kind", {}),
    "sk-bool": command("sk-bool", True, "no.such.kind", {}),
    "sk-u64": command("sk-u64", U64, "no.such.kind", {}),  # beyond int64: crashed the executor's journal once
    "sk-kind": command("sk-kind", 8, 42, {}),
    "sk-deadline": command("sk-deadline", 9, "no.such.kind", {}, deadline="soon"),
    # a float once read:
    "sk-u65": b'{"type": "command", "id": "sk-u65", "seq": 18446744073709551616, "kind": "no.such.kind"}',
}


def garbage(rng: random.Random) -> list[bytes]:
    lines = [
        b"not json",
        b'{"type": "command", "id": "sk-trunc", "seq": 10, "ki',
        b"\xff\xfe\xfd",
        b"[1, 2, 3]",
        b'{"type": 7}',
        b'{"no": "type"}',
        b"null",
        b"\x00\x00\x00",
        b"[" * 100_000,
        b'{"type": "command", "id": "sk-digits", "seq": ' + b"9" * 5000 + b', "kind": "x"}',
        b'{"type": "keepalive", "ts": {"junk": [1, 2, null]}, "extra": "\\u0000"}',
        b'{"type": "keepalive", "ts": "yesterday"}',
        b'{"type": "future.thing", "x": 1}',
        b'{"type": "hello", "node_id": 5, "after": "x"}',
        b'{"type": "command"}',
        b'{"type": "keepalive", "ts": "\xc3\x28"}',
        b"x" * (MAX_STREAM_LINE + 1),
        *SKIPPED.values(),
    ]
    lines += [
        bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))).replace(b"\n", b"") or b"?" for _ in range(10)
    ]
    rng.shuffle(lines)
    return lines


def breaks_stream(line: bytes) -> bool:
    """Not a JSON object with a string type: the client ends the stream there (a ProtocolError).
    A line over MAX_STREAM_LINE is skipped unread instead, and the stream goes on."""
    if not line.strip() or len(line) > MAX_STREAM_LINE:
        return False
    try:
        message = orjson.loads(line)
    except orjson.JSONDecodeError:
        return True
    return not isinstance(message, dict) or not isinstance(message.get("type"), str)


class GarbageBackend(LocalHTTP):
    def __init__(self, seed: int):
        rng = random.Random(seed)
        self.garbage = garbage(rng)
        # The script: valid commands in seq order at random places among the garbage.
        size = len(self.garbage) + len(VALID)
        slots = sorted(rng.sample(range(size), len(VALID)))
        rest = iter(self.garbage)
        valid = iter(VALID)
        self.script: list[tuple[int | None, bytes]] = [
            next(valid) if i in slots else (None, next(rest)) for i in range(size)
        ]
        self.sent_garbage: set[int] = set()
        self.lock = threading.Lock()
        self.records: list[tuple[float, dict]] = []
        self.streams = 0
        self.stopping = threading.Event()
        super().__init__()

    def close(self) -> None:
        self.stopping.set()
        super().close()

    def of_kind(self, kind: str) -> list[tuple[float, dict]]:
        with self.lock:
            return [(at, r) for at, r in self.records if r.get("kind") == kind]

    def timeline(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for _, record in self.of_kind("timeline"):
            out.setdefault(record["data"]["command_id"], []).append(record)
        return out

    def lines_for(self, after: int):
        """This connection's lines: commands after the cursor, and garbage not sent before up
        to the first line that breaks the stream (the agent drops the connection there, so
        what follows it in this connection would never be read)."""
        for index, (seq, line) in enumerate(self.script):
            if seq is not None:
                if seq > after:
                    yield line
                continue
            with self.lock:
                if index in self.sent_garbage:
                    continue
                self.sent_garbage.add(index)
            yield line
            if breaks_stream(line):
                return

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        backend = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            reply = reply_json

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = urlparse(self.path).path
                if path.endswith("/enroll"):
                    self.reply(200, {"node_id": "node-fuzz", "credential": "cred-fuzz", "protocol": 1})
                elif path.endswith("/uplink"):
                    records = orjson.loads(body)["records"]
                    with backend.lock:
                        backend.records += [(time.monotonic(), r) for r in records]
                    self.reply(200, {"acked": [r["id"] for r in records], "rejected": []})
                elif path == "/loki/api/v1/push":
                    self.reply(204)
                else:
                    self.reply(404, {"error": "not_found", "message": path})

            def do_GET(self) -> None:
                url = urlparse(self.path)
                if not url.path.endswith("/stream"):
                    self.reply(404, {"error": "not_found", "message": url.path})
                    return
                after = int(parse_qs(url.query)["after"][0])
                with backend.lock:
                    backend.streams += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    self.chunk(orjson.dumps({"type": "hello", "node_id": "node-fuzz", "after": after}))
                    for line in backend.lines_for(after):
                        self.chunk(line)
                    while not backend.stopping.wait(0.3):
                        self.chunk(orjson.dumps({"type": "keepalive", "ts": time.time()}))
                except OSError:
                    pass  # the agent dropped this stream (as it should after a bad line)
                self.close_connection = True

            def chunk(self, line: bytes) -> None:
                data = line + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def log_message(self, *args: object) -> None:
                pass

        return Handler


@pytest.fixture
def garbage_backend():
    backend = GarbageBackend(SEED)
    yield backend
    backend.close()


def test_a_garbage_downlink_neither_stops_heartbeats_nor_valid_commands(garbage_backend, tmp_path):
    print(f"seed {SEED}: {len(garbage_backend.script)} lines, {len(VALID)} valid commands")
    (tmp_path / "journal").mkdir()
    env = agent_env(
        tmp_path,
        backend_url=garbage_backend.url,
        enrollment_token="fdn_enr_fuzz",
        agent_id="fuzz-agent",
        heartbeat_interval_sec=0.5,
        stream_keepalive_sec=0.5,
        reconnect_min_sec=0.1,
        reconnect_max_sec=0.5,
        request_timeout_sec=5,
        loki_url=garbage_backend.url,
        journal_directory=tmp_path / "journal",
    )
    with AgentProcess(env, tmp_path / "agent.log") as agent:
        first = agent.workers()
        wait_for(
            lambda: (
                set(EXPECTED)
                <= {
                    cid
                    for cid, recs in garbage_backend.timeline().items()
                    if any(r["data"]["state"] in protocol.TERMINAL_STATES for r in recs)
                }
            ),
            45,
            what=f"terminal timeline records of {sorted(EXPECTED)}",
        )
        assert garbage_backend.sent_garbage == {i for i, (seq, _) in enumerate(garbage_backend.script) if seq is None}
        beats_before = len(garbage_backend.of_kind("heartbeat"))
        time.sleep(2)  # heartbeats go on after the storm
        rows = agent.workers()
        log_text = agent.log_text()

    timeline = garbage_backend.timeline()
    for command_id, (state, reason) in EXPECTED.items():
        terminal = {r["id"]: r["data"] for r in timeline[command_id] if r["data"]["state"] in protocol.TERMINAL_STATES}
        assert len(terminal) == 1, f"{command_id}: {terminal}"  # one terminal record id, even for the duplicate
        data = next(iter(terminal.values()))
        assert (data["state"], data["reason"]) == (state, reason), f"{command_id}: {data}"
        assert data["message"] and "\n" not in data["message"]
    reached = set(timeline) - set(EXPECTED)
    assert not reached, f"malformed command lines reached the executor: {sorted(reached)}"

    breaking = sum(breaks_stream(line) for line in garbage_backend.garbage)
    assert garbage_backend.streams > breaking, "each line that breaks a stream must have been read on its own stream"
    for name in ("stream", "executor"):
        assert rows[name]["restarts"] == 0 and rows[name]["pid"] == first[name]["pid"], (rows[name], log_text[-3000:])
    beats = [at for at, _ in garbage_backend.of_kind("heartbeat")]
    assert len(beats) > beats_before, "heartbeats stopped"
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    assert max(gaps) < 5, f"heartbeat gap of {max(gaps):.1f}s at a 0.5 s interval"
    assert "Traceback" not in log_text, log_text[-3000:]
