"""A real HTTP/1.1 server on 127.0.0.1 (stdlib, in a thread) that answers every request with
whatever the test scripted last: the property tests put hypothesis' statuses, headers and
bodies on a real socket instead of mocking requests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import NamedTuple


class Reply(NamedTuple):
    status: int
    body: bytes = b""
    headers: dict[str, str] = {}


class Request(NamedTuple):
    method: str
    path: str
    body: bytes
    headers: dict[str, str] = {}


class LocalHTTP:
    """A threaded stdlib server on a free 127.0.0.1 port; subclasses give `_handler()`."""

    def __init__(self) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError


class ScriptedHTTP(LocalHTTP):
    def __init__(self) -> None:
        self.script: Callable[[Request], Reply] = lambda request: Reply(200)
        self.requests: list[Request] = []
        super().__init__()

    def answer(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        """Answer every request alike from now on."""
        reply = Reply(status, body, headers or {})
        self.script = lambda request: reply
        self.requests = []

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = Request(self.command, self.path, self.rfile.read(length), dict(self.headers.items()))
                server.requests.append(request)
                reply = server.script(request)
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                if reply.status in (204, 304):  # no body allowed: bytes would poison the next answer
                    self.end_headers()
                    return
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            do_GET = do_POST = _serve

            def log_message(self, *args: object) -> None:
                pass

        return Handler


def reply_json(handler: BaseHTTPRequestHandler, status: int, body: object = None) -> None:
    """One JSON answer with its Content-Length (none for a None body)."""
    import orjson

    data = orjson.dumps(body) if body is not None else b""
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class StreamingHTTP(LocalHTTP):
    """A minimal backend (docs/protocol.md) whose stream is written with the framing the test
    picks: "chunked", "length" (a Content-Length far beyond what is sent), "close" (no length:
    the body ends when the connection closes), optionally gzip-encoded. Lines the test `put`s
    are written as they come, keepalives in between; the connection stays open until close().
    Enroll and uplink are answered (every uplinked record is kept in `records`)."""

    def __init__(self, framing: str = "chunked", gzip: bool = False, keepalive_s: float = 0.3):
        import queue

        self.framing, self.gzip, self.keepalive_s = framing, gzip, keepalive_s
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.records: list[dict] = []
        self.streams_open = 0
        self.streams_opened = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        super().__init__()

    def put(self, line: bytes) -> None:
        self.lines.put(line)

    def close(self) -> None:
        self.stopping.set()
        super().close()

    def timeline(self, command_id: str) -> list[dict]:
        with self.lock:
            return [
                r["data"]
                for r in self.records
                if r.get("kind") == "timeline" and r["data"].get("command_id") == command_id
            ]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        import queue
        import time
        import zlib

        import orjson

        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            reply = reply_json

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.endswith("/enroll"):
                    self.reply(200, {"node_id": "node-s", "credential": "cred-s", "protocol": 1})
                elif self.path.endswith("/uplink"):
                    records = orjson.loads(body)["records"]
                    with server.lock:
                        server.records += records
                    self.reply(200, {"acked": [r["id"] for r in records], "rejected": []})
                else:
                    self.reply(404, {"error": "not_found", "message": self.path})

            def do_GET(self) -> None:
                if "/stream" not in self.path:
                    self.reply(404, {"error": "not_found", "message": self.path})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                if server.framing == "chunked":
                    self.send_header("Transfer-Encoding", "chunked")
                elif server.framing == "length":
                    self.send_header("Content-Length", str(1 << 40))
                else:
                    self.send_header("Connection", "close")
                if server.gzip:
                    self.send_header("Content-Encoding", "gzip")
                self.end_headers()
                self.close_connection = True
                deflater = zlib.compressobj(wbits=31) if server.gzip else None
                with server.lock:
                    server.streams_open += 1
                    server.streams_opened += 1
                try:
                    self.write(deflater, b'{"type": "hello", "node_id": "node-s"}\n')
                    while not server.stopping.is_set():
                        try:
                            line = server.lines.get(timeout=server.keepalive_s)
                        except queue.Empty:
                            line = orjson.dumps({"type": "keepalive", "ts": time.time()})
                        self.write(deflater, line + b"\n")
                except OSError:
                    pass  # the client hung up
                finally:
                    with server.lock:
                        server.streams_open -= 1

            def write(self, deflater, data: bytes) -> None:
                if deflater is not None:
                    data = deflater.compress(data) + deflater.flush(zlib.Z_SYNC_FLUSH)
                if server.framing == "chunked":
                    data = b"%x\r\n%s\r\n" % (len(data), data)
                self.wfile.write(data)
                self.wfile.flush()

        return Handler
