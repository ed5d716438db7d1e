"""A real HTTP/1.1 server on 127.0.0.1 (stdlib, in a thread) that answers every request with
whatever the test scripted last: the property tests put hypothesis' statuses, headers and
bodies on a real socket instead of mocking requests."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, NamedTuple


class Reply(NamedTuple):
    status: int
    body: bytes = b""
    headers: dict[str, str] = {}


class Request(NamedTuple):
    method: str
    path: str
    body: bytes


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
                request = Request(self.command, self.path, self.rfile.read(length))
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
