"""The keep-alive POST client of the log shipper (workers/logs/loki/keepalive.py) on a real
socket, against a server that answers with raw bytes: every way HTTP/1.1 ends an answer,
a kept-alive connection closed by the server, and TLS verified with the configured CA."""

from __future__ import annotations

import socket
import ssl
import threading

import pytest

from faden_agent.config import load_config
from faden_agent.http.tls import client_context
from faden_agent.workers.logs.loki.destinations import DirectLoki
from faden_agent.workers.logs.loki.keepalive import BadAnswer, KeepAliveConnection
from tests.support.privateca import make_ca_and_server_cert


class RawServer:
    """Answers each request with the next scripted bytes; `close` after an answer ends that
    connection. Records every request's head and body and how many connections came."""

    def __init__(self, answers: list[tuple[bytes, bool]], tls: ssl.SSLContext | None = None):
        self.answers = list(answers)
        self.requests: list[tuple[bytes, bytes]] = []
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.tls = tls
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            reader = conn.makefile("rb")
            while self.answers:
                head = b""
                while (line := reader.readline()) not in (b"\r\n", b""):
                    head += line
                if not head:
                    return
                length = next(
                    int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")
                )
                self.requests.append((head, reader.read(length)))
                answer, close = self.answers.pop(0)
                conn.sendall(answer)
                if close:
                    return
        except (OSError, ssl.SSLError):
            return
        finally:
            conn.close()

    def close(self) -> None:
        self.listener.close()


def post(connection: KeepAliveConnection, body: bytes = b"{}", limit: int = 1000):
    return connection.post("/loki/api/v1/push", {"Content-Type": "application/json"}, body, limit)


def test_answers_without_body_with_length_and_chunked_share_one_connection():
    server = RawServer(
        [
            (b"HTTP/1.1 204 No Content\r\nDate: x\r\n\r\n", False),  # Loki's: no Content-Length
            (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 400 Bad Request\r\nContent-Length: 8\r\n\r\ntoo old\n", False),
            (
                b"HTTP/1.1 429 Too Many\r\nRetry-After: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"4\r\nslow\r\n3;x=y\r\n da\r\n0\r\n\r\n",
                False,
            ),
        ]
    )
    connection = KeepAliveConnection("127.0.0.1", server.port, None, 5)
    first, second, third = post(connection, b"one"), post(connection), post(connection)
    assert (first.status, first.body, first.reusable) == (204, b"", True)
    assert (second.status, second.body, second.reusable) == (400, b"too old\n", True)
    assert (third.status, third.body, third.headers["retry-after"], third.reusable) == (429, b"slow da", "3", True)
    assert server.connections == 1
    head, body = server.requests[0]
    assert head.startswith(b"POST /loki/api/v1/push HTTP/1.1\r\nHost: 127.0.0.1:") and body == b"one"
    connection.close()
    server.close()


def test_an_answer_read_until_close_or_over_the_limit_is_not_reused():
    server = RawServer(
        [
            (b"HTTP/1.1 500 Oops\r\nContent-Length: 5000\r\n\r\n" + b"x" * 5000, False),
            (b"HTTP/1.0 502 Bad Gateway\r\n\r\nupstream gone", True),
        ]
    )
    connection = KeepAliveConnection("127.0.0.1", server.port, None, 5)
    long = post(connection, limit=100)
    assert (long.status, len(long.body), long.reusable) == (500, 101, False)
    connection.close()
    until_close = post(connection)
    assert (until_close.status, until_close.body, until_close.reusable) == (502, b"upstream gone", False)
    server.close()


def test_garbage_is_a_bad_answer_and_silence_a_connection_error():
    server = RawServer([(b"SSH-2.0-OpenSSH\r\n\r\n", False), (b"", True)])
    connection = KeepAliveConnection("127.0.0.1", server.port, None, 5)
    with pytest.raises(BadAnswer):
        post(connection)
    connection.close()
    with pytest.raises(ConnectionError):
        post(connection)
    server.close()


def test_a_kept_alive_connection_the_server_closed_is_tried_once_anew(tmp_path):
    server = RawServer([(b"HTTP/1.1 204 No Content\r\n\r\n", True), (b"HTTP/1.1 204 No Content\r\n\r\n", False)])
    config = load_config({}, loki_url=f"http://127.0.0.1:{server.port}", state_path=tmp_path / "state.json")
    loki = DirectLoki(config.loki_url, config)
    assert loki.send(b"{}").ok
    assert loki.send(b"{}").ok  # the first connection was closed after its answer
    assert server.connections == 2 and len(server.requests) == 2
    loki.close()
    server.close()


def test_tls_is_verified_with_the_configured_ca_and_refused_without_it(tmp_path):
    ca, cert, key = make_ca_and_server_cert(tmp_path)
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    server = RawServer([(b"HTTP/1.1 204 No Content\r\n\r\n", False)] * 2, tls=server_tls)
    trusting = KeepAliveConnection("127.0.0.1", server.port, client_context(str(ca)), 5)
    assert post(trusting).status == 204
    trusting.close()
    system_cas = KeepAliveConnection("127.0.0.1", server.port, client_context(True), 5)
    with pytest.raises(ssl.SSLCertVerificationError):
        post(system_cas)
    system_cas.close()
    server.close()


@pytest.mark.parametrize(
    "drip",
    [
        b"HTTP/1.1 200 OK\r\nX-Slow: " + b"x" * 200,  # a head a byte at a time
        b"HTTP/1.1 100 Continue\r\n\r\n" * 20,  # 1xx heads without end
    ],
)
def test_one_deadline_holds_a_dripping_or_endless_answer(drip):
    """Each byte comes well within the socket timeout: only the push's one deadline ends it
    (the server closes after all its bytes, 4 s and more: an unbounded read meets that end)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            for byte in drip:
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return  # the client gave up
                threading.Event().wait(0.02)

    threading.Thread(target=serve, daemon=True).start()
    conn = KeepAliveConnection("127.0.0.1", listener.getsockname()[1], None, timeout_s=1.0)
    try:
        with pytest.raises(TimeoutError):  # not the end of the bytes, 4 s and more later
            conn.post("/loki/api/v1/push", {}, b"{}", 1024)
    finally:
        conn.close()
        listener.close()
