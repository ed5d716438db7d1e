"""A Docker engine's Unix socket whose /version answer the test scripts byte by byte (odd
versions, an empty one, a drip-fed head or body, a huge answer); every other request gets an
empty JSON list, as `GET /containers/json` of an engine without containers. It keeps the path
and head of every request, so a test sees which API version was put into them."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson

Answer = Callable[[socket.socket], None]


def version_json(api_version: object, min_version: object = "1.24", **extra: object) -> Answer:
    body = orjson.dumps({"Version": "20.10.24", "ApiVersion": api_version, "MinAPIVersion": min_version, **extra})
    return raw(head(200, len(body)) + body)


def head(status: int, length: int) -> bytes:
    return b"HTTP/1.1 %d OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (status, length)


def raw(data: bytes) -> Answer:
    return lambda sock: sock.sendall(data)


def dripped(data: bytes, every_s: float, then: int = 0) -> Answer:
    """`data` from byte `then` on one byte every `every_s` (the bytes before at once)."""

    def answer(sock: socket.socket) -> None:
        sock.sendall(data[:then])
        for byte in data[then:]:
            time.sleep(every_s)
            sock.sendall(bytes([byte]))

    return answer


class ScriptedEngine:
    def __init__(self, path: Path, version: Answer):
        self.path = path
        self.version = version
        self.paths: list[str] = []
        self.heads: list[bytes] = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def host(self) -> str:
        return f"unix://{self.path}"

    def versions_asked(self) -> int:
        return sum(1 for p in self.paths if p == "/version")

    def close(self) -> None:
        self.server.close()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = sock.recv(65536)
                    if not data:
                        return
                    buffer += data
                request, buffer = buffer.split(b"\r\n\r\n", 1)
                path = request.split(b" ", 2)[1].decode()
                self.heads.append(request)
                self.paths.append(path)
                if path == "/version":
                    self.version(sock)
                else:
                    sock.sendall(head(200, 2) + b"[]")
        except OSError:
            pass
        finally:
            sock.close()
