"""faden_agent/http/client.py and proxies.py against real sockets: encodings decoded within
bounds, kept-alive connections given back or dropped, a server that closed one idle, proxies
from the environment (with their login, never in a message), a Unix socket, a silent server."""

from __future__ import annotations

import base64
import gzip
import socket
import threading
import time
import zlib

import pytest

from faden_agent.http import proxies
from faden_agent.http.answerbody import AnswerTooLarge
from faden_agent.http.client import HttpClient, HttpFailure
from tests.support.scriptedhttp import ScriptedHTTP
from tests.support.silentserver import SilentServer


@pytest.fixture
def scripted():
    server = ScriptedHTTP()
    yield server
    server.close()


@pytest.mark.parametrize(
    "encoding, pack",
    [
        ("gzip", lambda data: gzip.compress(data)),
        ("deflate", zlib.compress),  # zlib-wrapped, as the RFC says
        ("deflate", lambda data: zlib.compress(data, wbits=-zlib.MAX_WBITS)),  # raw, as many servers send it
        ("identity", lambda data: data),
    ],
)
def test_an_encoded_answer_reads_decoded(scripted, encoding, pack):
    text = b"GPU-0 healthy\n" * 10_000
    scripted.answer(200, pack(text), {"Content-Encoding": encoding})
    with HttpClient().request("GET", scripted.url + "/x", timeout=5) as answer:
        assert answer.status == 200 and answer.read_all(1 << 20, 5) == text


def test_a_gzip_bomb_inflates_a_bounded_piece_a_read(scripted):
    bomb = gzip.compress(bytes(64 << 20), 9)  # 64 MiB of zeros in ~64 KiB
    scripted.answer(200, bomb, {"Content-Encoding": "gzip"})
    with HttpClient().request("GET", scripted.url, timeout=5) as answer:
        assert len(answer.read1(1000)) == 1000 and answer.raw_bytes < len(bomb)
    with HttpClient().request("GET", scripted.url, timeout=5) as answer:
        with pytest.raises(AnswerTooLarge, match="over 1048576 bytes"):
            answer.read_all(1 << 20, 5)


def test_answers_read_to_their_end_keep_one_connection(scripted):
    client = HttpClient(headers={"User-Agent": "t"})
    ports = set()
    for _ in range(3):
        with client.request("POST", scripted.url + "/p", body=b"{}", timeout=5) as answer:
            answer.read_all(100, 5)
        ports |= {conn.sock.getsockname()[1] for conn in client._open}
    assert len(ports) == 1 and [r.headers["User-Agent"] for r in scripted.requests] == ["t"] * 3
    # an answer closed before its end takes its connection with it
    scripted.answer(200, b"x" * 100_000)
    with client.request("GET", scripted.url, timeout=5) as answer:
        answer.read1(10)
    assert not client._open


class OneAnswerThenClose:
    """Answers one request per connection with a keep-alive answer, then closes it idle (as
    servers do past their idle timeout)."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(4096)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.getsockname()[1]}/"


def test_a_connection_the_server_closed_idle_is_not_used_again():
    server = OneAnswerThenClose()
    client = HttpClient()
    try:
        for _ in range(2):
            with client.request("GET", server.url, timeout=5) as answer:
                assert answer.read_all(10, 5) == b"ok"
            time.sleep(0.3)  # the server closed it meanwhile
        assert server.accepted == 2
    finally:
        server.server.close()


def test_a_silent_server_ends_at_the_read_bound_and_a_refusal_is_named():
    silent = SilentServer.tcp()
    try:
        started = time.monotonic()
        with pytest.raises(HttpFailure, match="TimeoutError"):
            HttpClient().request("GET", f"http://127.0.0.1:{silent.port}/", timeout=(5, 0.5))
        assert time.monotonic() - started < 3
    finally:
        silent.close()
    free = socket.create_server(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    with pytest.raises(HttpFailure, match="ConnectionRefusedError: Connection refused"):
        HttpClient().request("GET", f"http://127.0.0.1:{port}/", timeout=2)


def test_a_unix_socket_takes_every_request(tmp_path):
    path = str(tmp_path / "engine.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    heads: list[bytes] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            heads.append(conn.recv(4096))
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK")

    threading.Thread(target=serve, daemon=True).start()
    with HttpClient(unix_socket=path).request("GET", "http://localhost/_ping", timeout=5) as answer:
        assert answer.read_all(10, 5) == b"OK"
    assert heads[0].startswith(b"GET /_ping HTTP/1.1\r\n") and b"Host: localhost\r\n" in heads[0]
    server.close()


def test_an_http_proxy_gets_the_whole_url_and_its_login(scripted, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", scripted.url.replace("http://", "http://ops:s3cret@"))
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.setenv("NO_PROXY", "")
    monkeypatch.delenv("no_proxy", raising=False)
    with HttpClient().request("GET", "http://backend.invalid:8000/a?b=1", timeout=5) as answer:
        answer.read_all(10, 5)
    seen = scripted.requests[-1]
    assert seen.path == "http://backend.invalid:8000/a?b=1"
    assert seen.headers["Proxy-Authorization"] == "Basic " + base64.b64encode(b"ops:s3cret").decode()
    monkeypatch.setenv("NO_PROXY", ".invalid")
    with pytest.raises(HttpFailure):  # directly now: the name resolves nowhere
        HttpClient().request("GET", "http://backend.invalid:8000/a", timeout=2)
    assert len(scripted.requests) == 1


@pytest.mark.parametrize(
    "no_proxy, host, port, bypassed",
    [
        ("", "backend.example", 443, False),
        ("*", "backend.example", 443, True),
        ("example", "backend.example", 443, True),
        (".example", "backend.example", 443, True),
        ("*.example", "backend.example", 443, True),
        ("ample", "backend.example", 443, False),  # a suffix of the name, not of a domain
        ("backend.example:443", "backend.example", 443, True),
        ("backend.example:8443", "backend.example", 443, False),
        ("10.0.0.0/8, 127.0.0.1", "10.1.2.3", 80, True),
        ("10.0.0.0/8", "192.168.0.1", 80, False),
        ("10.0.0.0/8", "ten.example", 80, False),
        (" localhost ,  BACKEND.example ", "backend.example.", 443, True),
    ],
)
def test_no_proxy_reads_as_curl_and_requests_read_it(no_proxy, host, port, bypassed):
    assert proxies.bypassed(host, port, no_proxy) is bypassed


def test_a_proxy_setting_it_cannot_use_is_named_without_its_password(monkeypatch):
    assert proxies.parse_proxy("proxy.corp:3128")[:2] == ("proxy.corp", 3128)
    for url in ("socks5://ops:s3cret@proxy:1080", "https://ops:s3cret@proxy:3128", "http://ops:s3cret@proxy:99999"):
        with pytest.raises(proxies.ProxyError) as failed:
            proxies.parse_proxy(url)
        assert "s3cret" not in str(failed.value) and "proxy" in str(failed.value)
    monkeypatch.setenv("HTTPS_PROXY", "socks5://ops:s3cret@proxy:1080")
    monkeypatch.delenv("https_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with pytest.raises(HttpFailure, match="only http:// proxies") as failed:
        HttpClient().request("GET", "https://backend.example/", timeout=1)
    assert "s3cret" not in str(failed.value)


def test_the_connections_of_threads_that_ended_are_closed_at_a_new_threads_first_request(scripted):
    client = HttpClient()

    def one_request() -> None:
        with client.request("GET", scripted.url, timeout=5) as answer:
            answer.read_all(10, 5)

    for _ in range(5):  # a thread a round, as the inventory's probe has
        worker = threading.Thread(target=one_request)
        worker.start()
        worker.join()
        assert len(client._open) == 1  # the ended thread's kept connection went with the next one's start


def test_a_close_from_another_thread_ends_a_read_blocked_on_a_quiet_answer():
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def serve() -> None:  # a head, then a body that never comes (a followed log of a quiet container)
        conn, _ = server.accept()
        held.append(conn)
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    client = HttpClient()
    answer = client.request("GET", f"http://127.0.0.1:{server.getsockname()[1]}/", timeout=(5, None))
    outcome: list[object] = []

    def read() -> None:
        try:
            outcome.append(answer.read1())
        except HttpFailure as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(0.3)
    started = time.monotonic()
    client.close()
    reader.join(5)
    assert time.monotonic() - started < 2 and not reader.is_alive() and len(outcome) == 1
    assert not client._open  # the reader closed what the close shut down
    server.close()
    for conn in held:
        conn.close()


def test_a_header_value_that_would_split_the_request_fails_that_request_only(scripted):
    client = HttpClient()
    with pytest.raises(HttpFailure, match="ValueError"):
        client.request("GET", scripted.url, headers={"X-Scope-OrgID": "a\r\nX-Evil: 1"}, timeout=5)
    assert scripted.requests == [] and not client._open
    with client.request("GET", scripted.url, timeout=5) as answer:
        assert answer.status == 200
