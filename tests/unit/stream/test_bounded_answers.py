"""Answers read within bounds (answerbody.py) by every requests-based client, against a real
HTTP server on a socket that answers endlessly, drips, or sends a gzip bomb: the backend
client, the Loki pusher behind a proxy and the relay's answers each fail that one request
with a reason; a well-behaved backend's connection is still kept between requests."""

from __future__ import annotations

import functools
import gzip
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psutil
import pytest
import requests

from faden_agent.backend.client import BackendClient, BackendUnavailable, ProtocolError
from faden_agent.cli.doctor import Doctor
from faden_agent.devbackend.app import Backend
from faden_agent.devbackend.server import make_server
from faden_agent.workers.executor.commands.image import _relay_answer
from faden_agent.workers.executor.docker_ops import CommandFailed
from faden_agent.workers.logs.loki.destinations import DirectLoki
from tests.support.clientconfig import config_for as backend_config


@functools.cache
def bomb() -> bytes:
    return gzip.compress(b"0" * (16 << 20))  # 16 MiB of zeros in about 16 KiB: 4 x the bound


class Hostile:
    """Answers every request with `status` and a body shaped by `mode`: endless (chunked, never
    ends), drip (a byte every 50 ms of a promised 10,000) or bomb (gzip-encoded)."""

    def __init__(self, mode: str, status: int = 200, date: str | None = None):
        self.mode, self.status, self.date = mode, status, date
        self.sent = 0
        self.stop = threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hostile = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.close_connection = True  # one answer a connection: the client gives up on it
                if hostile.date is None:
                    self.send_response(hostile.status)
                else:  # its own Date only
                    self.send_response_only(hostile.status)
                    self.send_header("Date", hostile.date)
                try:
                    getattr(self, "_" + hostile.mode)()
                except OSError:
                    pass  # the client gave up: what it should do

            def _endless(self) -> None:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                block = b"x" * (64 << 10)
                while not hostile.stop.is_set():
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(block), block))
                    hostile.sent += len(block)

            def _drip(self) -> None:
                self.send_header("Content-Length", "10000")
                self.end_headers()
                while not hostile.stop.wait(0.05):
                    self.wfile.write(b"{")
                    self.wfile.flush()
                    hostile.sent += 1

            def _bomb(self) -> None:
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(bomb())))
                self.end_headers()
                self.wfile.write(bomb())

            do_GET = do_POST = _serve

            def log_message(self, *args: object) -> None:
                pass

        return Handler


@pytest.fixture
def hostile(request):
    server = Hostile(*request.param)
    yield server
    server.close()


def config_for(url: str, tmp_path):
    return backend_config(url, tmp_path, request_timeout_sec=1)


@pytest.mark.parametrize("hostile", [("endless",), ("bomb",)], indirect=True)
def test_a_backend_answer_over_the_bound_is_a_protocol_error(hostile, tmp_path):
    client = BackendClient(config_for(hostile.url, tmp_path), "credential")
    with pytest.raises(ProtocolError, match=r"answer to POST /api/agent/v1/uplink: an answer over 4194304 bytes"):
        client.post_reports([])
    assert hostile.mode != "endless" or hostile.sent < 64 << 20  # it stopped reading, not the server


@pytest.mark.parametrize("hostile", [("drip",)], indirect=True)
def test_a_dripping_backend_answer_ends_at_the_request_timeout(hostile, tmp_path):
    client = BackendClient(config_for(hostile.url, tmp_path), "credential")
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="an answer still arriving after 1 s"):
        client.log_target()
    assert time.monotonic() - started < 5  # 10,000 bytes at 20 a second would take 500 s


@pytest.mark.parametrize("hostile", [("endless", 500)], indirect=True)
def test_a_refusal_with_an_endless_body_keeps_its_status(hostile, tmp_path):
    client = BackendClient(config_for(hostile.url, tmp_path), "credential")
    with pytest.raises(BackendUnavailable, match=r"HTTP 500 \(an answer over 65536 bytes\)") as raised:
        client.post_reports([])
    assert raised.value.status == 500


def test_a_good_backend_keeps_one_connection_for_every_request(tmp_path):
    backend = Backend(tmp_path / "data", "admin", keepalive_sec=0.2)
    httpd = make_server(backend, "127.0.0.1", 0)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        config = config_for(url, tmp_path)
        credential = BackendClient(config).enroll(backend.store.mint_token(), {"agent_id": "a", "host": "h"})
        client = BackendClient(config, credential["credential"])
        port = httpd.server_address[1]
        ours = psutil.Process()
        used: set[int] = set()  # the local ports of this process's connections to the backend
        for call in [lambda: client.post_reports([])] * 3 + [client.log_target]:
            call()
            used |= {c.laddr.port for c in ours.net_connections("tcp") if c.raddr and c.raddr.port == port}
        assert len(used) == 1  # bodies read to their end: the connection went back each time
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("hostile", [("endless", 400), ("bomb", 429)], indirect=True)
def test_loki_behind_a_proxy_answering_endlessly_keeps_its_status(hostile, tmp_path, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", hostile.url)  # every push goes through the proxy (http/client.py)
    monkeypatch.setenv("NO_PROXY", "")
    target = DirectLoki("http://loki.invalid:3100", config_for("http://backend.invalid", tmp_path))
    assert target.proxied is not None
    answer = target.send(b'{"streams": []}')
    target.close()
    assert (answer.status, answer.detail) == (hostile.status, "(an answer over 65536 bytes)")


@pytest.mark.parametrize("hostile", [("endless",), ("bomb",)], indirect=True)
def test_a_relay_answer_out_of_bounds_fails_the_command(hostile):
    answer = requests.get(hostile.url, stream=True, timeout=(5, 5))
    with pytest.raises(CommandFailed, match="the relay's answer is unusable") as failed:
        _relay_answer(answer)
    assert failed.value.reason == "peer_failed"


@pytest.mark.parametrize(
    "hostile", [("endless", 200, "not a date"), ("endless", 503, "Tue, 01 Jan 99999999 00:00")], indirect=True
)
def test_doctor_reads_only_the_head_and_names_a_date_that_is_no_date(hostile, tmp_path):
    doctor = Doctor(config_for(hostile.url, tmp_path))
    started = time.monotonic()
    clock = doctor.backend_clock()
    assert (clock.status, clock.detail) == (
        "warn",
        f"the backend's Date header is no date ({hostile.date!r}); skew unknown",
    )
    assert time.monotonic() - started < 5 and hostile.sent < 64 << 20  # the endless body was not read
