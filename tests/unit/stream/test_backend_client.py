"""The agent's HTTP client against the real reference backend server (in a thread) and
small real socket servers for the timeout and proxy cases."""

from __future__ import annotations

import email.utils
import http.client
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import orjson
import pytest

from faden_agent import protocol
from faden_agent.backend.client import (
    BackendClient,
    BackendUnavailable,
    CredentialRejected,
    Maintenance,
    ProtocolError,
    RequestRejected,
    TokenRefused,
    parse_retry_after,
)
from faden_agent.backend.outbox import make_record
from faden_agent.devbackend.app import Backend
from faden_agent.devbackend.server import make_server
from tests.support.clientconfig import config_for

FACTS = {"agent_id": "unit-agent", "host": "127.0.0.1", "version": "0"}


@pytest.fixture
def server(tmp_path):
    backend = Backend(tmp_path / "data", "admin", keepalive_sec=0.2)
    httpd = make_server(backend, "127.0.0.1", 0)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield backend, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def enrolled(server, tmp_path):
    backend, url = server
    config = config_for(url, tmp_path)
    reply = BackendClient(config).enroll(backend.store.mint_token(), FACTS)
    return config, BackendClient(config, reply["credential"]), reply


def test_enroll_once_then_token_refused(server, tmp_path):
    backend, url = server
    config = config_for(url, tmp_path)
    token = backend.store.mint_token()
    reply = BackendClient(config).enroll(token, FACTS)
    assert reply["node_id"].startswith("node-") and reply["credential"]
    with pytest.raises(TokenRefused, match="already used") as info:
        BackendClient(config).enroll(token, FACTS)
    assert token not in str(info.value)
    with pytest.raises(TokenRefused, match="unknown"):
        BackendClient(config).enroll("made-up", FACTS)


def test_uplink_acks_and_resends_are_idempotent(server, tmp_path):
    backend, _ = server
    _, client, reply = enrolled(server, tmp_path)
    beat = make_record(protocol.HEARTBEAT, {"version": "9", "workers": []})
    event = make_record(protocol.EVENT, {"type": "x"})
    for _ in range(3):
        acked, rejected = client.post_reports([beat, event, {"kind": "event"}])
        assert acked == [beat["id"], event["id"]] and rejected == []
    node = backend.store.node(reply["node_id"])
    assert node["heartbeats"] == 1 and node["version"] == "9"
    assert len(backend.store.records(reply["node_id"], protocol.EVENT)) == 1


def test_maintenance_is_typed_with_retry_after(server, tmp_path):
    backend, _ = server
    _, client, _ = enrolled(server, tmp_path)
    backend.faults.maintenance_retry_after = 7
    with pytest.raises(Maintenance) as info:
        client.post_reports([])
    assert info.value.retry_after == 7 and info.value.status == 503


def test_a_503_holds_every_client_of_the_agent_until_retry_after(server, tmp_path):
    backend, _ = server
    (tmp_path / "run").mkdir(mode=0o700)
    config, client, reply = enrolled(server, tmp_path)
    other = BackendClient(config, reply["credential"])  # e.g. the log worker, another process
    backend.faults.maintenance_retry_after = 1
    with pytest.raises(Maintenance):
        client.post_reports([])
    backend.faults.maintenance_retry_after = None  # the backend is back, but we were told to wait
    with pytest.raises(Maintenance, match="not sent"):
        other.log_target()
    time.sleep(1.1)
    assert other.log_target()["mode"] in ("loki", "push")


@pytest.mark.parametrize("bad", ["a b", "x\r\nX-Evil: 1", "", 7, ["t"], "..", "t" * 151])
def test_a_log_target_tenant_loki_would_refuse_is_a_protocol_error(server, tmp_path, bad):
    backend, _ = server
    _, client, _ = enrolled(server, tmp_path)
    backend.loki_url, backend.loki_tenant = "http://127.0.0.1:9", "team-a"
    assert client.log_target() == {"mode": "loki", "url": "http://127.0.0.1:9", "tenant": "team-a"}
    backend.loki_tenant = bad
    if bad == "":  # the reference backend names no tenant then
        assert "tenant" not in client.log_target()
        return
    with pytest.raises(ProtocolError, match="tenant is not a Loki tenant ID"):
        client.log_target()


def test_retry_after_forms():
    assert parse_retry_after("30") == 30
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    later = email.utils.formatdate(time.time() + 60, usegmt=True)
    assert 55 < parse_retry_after(later) <= 60


def test_unknown_and_revoked_credentials(server, tmp_path):
    backend, url = server
    config, client, reply = enrolled(server, tmp_path)
    with pytest.raises(CredentialRejected) as info:
        BackendClient(config, "not-a-credential").post_reports([])
    assert info.value.status == 401 and "not-a-credential" not in str(info.value)
    backend.store.revoke(reply["node_id"])
    with pytest.raises(CredentialRejected) as info:
        client.post_reports([])
    assert info.value.status == 403


def test_log_target_and_push_through_the_backend(server, tmp_path):
    backend, _ = server
    _, client, reply = enrolled(server, tmp_path)
    assert client.log_target() == {"mode": "push", "path": "/api/agent/v1/logs/push"}
    push = {"streams": [{"stream": {"job": "node-agent"}, "values": [["1700000000000000000", "hello"]]}]}
    client.push_logs(orjson.dumps(push), gzip=True)
    client.push_logs(orjson.dumps(push), gzip=False)
    lines = backend.store.log_lines(reply["node_id"])
    assert [line["line"] for line in lines] == ["hello", "hello"]
    with pytest.raises(RequestRejected) as info:
        client.push_logs(b"{nope")
    assert info.value.status == 400


def test_stream_delivers_commands_and_detects_a_stall(server, tmp_path):
    backend, _ = server
    _, client, reply = enrolled(server, tmp_path)
    backend.store.add_command(reply["node_id"], "no.such.kind", {"a": 1}, "c1", None)
    lines = iter(client.open_stream(after=0, keepalive_sec=0.2))
    assert next(lines)["type"] == "hello"
    assert next(lines) == {"type": "peers", "cluster": None, "peers": []}  # in no cluster
    assert next(lines) == {
        "type": "command",
        "seq": 1,
        "id": "c1",
        "kind": "no.such.kind",
        "spec": {"a": 1},
        "deadline": None,
    }
    assert next(lines)["type"] == "keepalive"
    backend.faults.stall_streams = True
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="stream broke"):
        for _ in lines:
            pass
    assert time.monotonic() - started < 3 * 0.2 + 1 + 2  # read timeout 3 x keepalive + 1, plus slack


def test_every_request_is_bounded_by_the_timeout(tmp_path):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(5)  # accepts connections (kernel backlog), never answers
    try:
        config = config_for(f"http://127.0.0.1:{silent.getsockname()[1]}", tmp_path, request_timeout_sec=0.5)
        started = time.monotonic()
        with pytest.raises(BackendUnavailable, match="Timeout"):
            BackendClient(config, "c").post_reports([])
        assert time.monotonic() - started < 3
    finally:
        silent.close()


class _RecordingProxy(BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self):
        _RecordingProxy.seen.append(self.path)
        body = b'{"mode": "push", "path": "/via-proxy"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_proxy_environment_is_honoured(tmp_path, monkeypatch):
    proxy = HTTPServer(("127.0.0.1", 0), _RecordingProxy)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        target = "http://backend.invalid:8000"  # resolvable only through the proxy
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.server_address[1]}")
        monkeypatch.setenv("NO_PROXY", "")
        client = BackendClient(config_for(target, tmp_path), "c")
        assert client.log_target()["path"] == "/via-proxy"
        assert _RecordingProxy.seen == [f"{target}/api/agent/v1/logs/target"]
        monkeypatch.setenv("NO_PROXY", "backend.invalid")
        with pytest.raises(BackendUnavailable):
            BackendClient(config_for(target, tmp_path), "c").log_target()
        assert len(_RecordingProxy.seen) == 1
    finally:
        proxy.shutdown()


def test_a_batch_of_512_bytes_or_more_goes_gzipped_when_asked_and_arrives_whole(server, tmp_path, monkeypatch):
    backend, _ = server
    _, client, reply = enrolled(server, tmp_path)
    wire: list[bytes] = []  # what http.client writes to the socket: each request's head and body
    send = http.client.HTTPConnection.send

    def recording(conn, data):
        wire.append(bytes(data))
        return send(conn, data)

    monkeypatch.setattr(http.client.HTTPConnection, "send", recording)

    def sent() -> tuple[str | None, int, bool]:
        head = next(part for part in wire if part.startswith(b"POST "))
        body = wire[-1] if wire[-1] is not head else b""
        fields = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:] if b": " in line)
        wire.clear()
        encoding = fields.get(b"Content-Encoding")
        return (encoding.decode() if encoding else None, len(body), b"Accept" in fields or b"Connection" in fields)

    big = make_record(protocol.EVENT, {"type": "x", "blob": "GPU-0 nvlink " * 500})
    small = make_record(protocol.EVENT, {"type": "y"})
    assert client.post_reports([big], gzip=True)[0] == [big["id"]]
    first = sent()
    assert client.post_reports([small], gzip=True)[0] == [small["id"]]
    second = sent()
    assert client.post_reports([dict(big, id="plain")])[0] == ["plain"]  # a backend of the previous version
    third = sent()
    assert [(encoding, size < 1000) for encoding, size, _ in (first, second, third)] == [
        ("gzip", True),
        (None, True),
        (None, False),
    ]
    assert {spelled for _, _, spelled in (first, second, third)} == {False}  # HTTP/1.1's defaults are not spelled out
    stored = {r["id"]: r["data"] for r in backend.store.records(reply["node_id"], protocol.EVENT)}
    assert stored[big["id"]]["blob"] == big["data"]["blob"]
