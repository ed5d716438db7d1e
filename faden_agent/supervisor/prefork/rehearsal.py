"""A rehearsal of the workers' common calls in the supervisor, before it forks."""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from socketserver import ThreadingMixIn, UnixStreamServer
from typing import Any

import orjson

log = logging.getLogger(__name__)

ROUNDS = 12  # past 3.11's warm-up (8 calls) and the first specializations
TIMEOUT_S = 2.0
MAX_BODY_BYTES = 64 * 1024  # the rehearsal's own bodies are tiny; anything else is not read
# What an engine's /version says: the client's API version negotiation runs as in a worker.
VERSION_BODY = b'{"Version": "rehearsal", "ApiVersion": "1.44", "MinAPIVersion": "1.24"}'


class _Answers(BaseHTTPRequestHandler):
    """Answers every request with a small JSON body, as a backend or an engine would."""

    protocol_version = "HTTP/1.1"
    timeout = TIMEOUT_S  # a connection left open (another local process's) ends the thread soon

    def _answer(self) -> None:
        # The loopback port is open to other local processes while it runs: what is not a
        # small body of the rehearsal's own ends the connection unanswered.
        length = self.headers.get("Content-Length") or "0"
        if not length.isdigit() or int(length) > MAX_BODY_BYTES:
            self.close_connection = True
            return
        self.rfile.read(int(length))
        path = self.path.split("?")[0]
        body = b"[]" if path.endswith("/json") else VERSION_BODY if path == "/version" else b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Api-Version", "1.44")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_HEAD = do_DELETE = _answer

    def log_message(self, *args: Any) -> None:
        pass


class _TcpAnswers(_Answers):
    disable_nagle_algorithm = True  # head and body are two writes: no 40 ms wait for an ACK


class _Quiet:
    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("rehearsal server: a connection failed", exc_info=True)  # not a traceback on stderr


class _TcpServer(_Quiet, ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins the answering threads: none is left at the fork


class _UnixServer(_Quiet, ThreadingMixIn, UnixStreamServer):
    def get_request(self) -> tuple[socket.socket, tuple[str, int]]:
        request, _ = super().get_request()
        return request, ("rehearsal", 0)  # BaseHTTPRequestHandler expects a host and port


def rehearse() -> dict[str, int]:
    """Runs each rehearsal; {its name: the calls it made, 0 when it failed}. Never raises."""
    done = {}
    for step in (rehearse_http, rehearse_docker, rehearse_sqlite):
        name = step.__name__.removeprefix("rehearse_")
        try:
            done[name] = step()
        except Exception as exc:  # noqa: BLE001 - a rehearsal only saves memory; the workers do the real work
            log.debug("rehearsal %s skipped: %s", name, exc)
            done[name] = 0
    return done


def _serve(server: Any) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return thread


def _stop(server: Any, thread: threading.Thread) -> None:
    server.shutdown()
    server.server_close()
    thread.join(TIMEOUT_S)


def rehearse_http() -> int:
    """requests over TCP, as the stream worker talks to the backend."""
    import requests

    server = _TcpServer(("127.0.0.1", 0), _TcpAnswers)
    thread = _serve(server)
    url = f"http://127.0.0.1:{server.server_address[1]}/api/rehearsal"
    try:
        with requests.Session() as session:
            for index in range(ROUNDS):
                session.post(url, data=orjson.dumps({"round": index}), timeout=TIMEOUT_S).json()
                session.get(url, params={"round": index}, timeout=TIMEOUT_S).json()
    finally:
        _stop(server, thread)
    return 2 * ROUNDS


def rehearse_docker() -> int:
    """The Docker SDK over a Unix socket, as the executor, inventory and log workers talk to
    the engine."""
    from faden_agent.common.dockerclient import make_client

    with tempfile.TemporaryDirectory(prefix="faden-rehearsal-") as folder:
        path = Path(folder) / "engine.sock"
        server = _UnixServer(str(path), _Answers)
        os.chmod(path, 0o600)
        thread = _serve(server)
        try:
            client = make_client(f"unix://{path}", timeout_s=TIMEOUT_S, max_pool_size=1)
            try:
                for _ in range(ROUNDS):
                    client.api.ping()
                    client.api.containers(all=True)
                    client.api.inspect_container("rehearsal")
                    client.api.version()
            finally:
                client.close()
        finally:
            _stop(server, thread)
    return 4 * ROUNDS


def rehearse_sqlite() -> int:
    """SQLite as the outbox and the executor's journal use it."""
    db = sqlite3.connect(":memory:", isolation_level=None)
    try:
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB)")
        for index in range(ROUNDS):
            db.execute("INSERT INTO t (body) VALUES (?)", (orjson.dumps({"round": index}),))
            db.execute("SELECT id, body FROM t ORDER BY id LIMIT 10").fetchall()
            db.execute("DELETE FROM t WHERE id <= ?", (index,))
    finally:
        db.close()
    return 3 * ROUNDS
