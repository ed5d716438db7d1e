"""A gate in front of a real Docker engine that speaks another API range than the engine:
it answers /version with its own range, refuses a request outside it with the engine's own
400 text ("client version 1.41 is too old. Minimum supported API version is 1.44, ..."),
and passes the rest to the engine at a version the engine takes. Its range changes while
clients stay connected: an engine upgraded mid-run, or a version no real engine here has."""

from __future__ import annotations

import json
import re
import socket
import socketserver
import threading
from pathlib import Path
from typing import Any

_VERSIONED = re.compile(rb"^(\w+) /v(\d+\.\d+)(/\S*) HTTP/1\.[01]\r\n", re.ASCII)
_UNVERSIONED = re.compile(rb"^(\w+) (/\S*) HTTP/1\.[01]\r\n", re.ASCII)


def as_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


class VersionGate:
    def __init__(self, path: Path, engine_socket: str, engine_version: str, api_min: str, api_max: str):
        self.path = path
        self.engine_socket = engine_socket
        self.engine_version = engine_version  # what the real engine behind takes (its newest)
        self.api_min, self.api_max = api_min, api_max
        self.seen: list[tuple[str, str]] = []  # (version asked or "", path): each request
        self.refused: list[str] = []  # the versions refused
        gate = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                gate.serve(self.request, self.rfile)

        self.server = socketserver.ThreadingUnixStreamServer(str(path), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def host(self) -> str:
        return f"unix://{self.path}"

    def speak(self, api_min: str, api_max: str) -> None:
        """From now on: this range (connections already open stay open)."""
        self.api_min, self.api_max = api_min, api_max

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def serve(self, conn: socket.socket, rfile: Any) -> None:
        """One request per connection: the answer ends with the connection."""
        head = b"".join(iter(rfile.readline, b"\r\n")) + b"\r\n"  # the request line and headers
        versioned = _VERSIONED.match(head)
        if versioned:
            _, asked, rest = versioned.groups()
            self.seen.append((asked.decode(), rest.decode()))
            refusal = self._refusal(asked.decode())
            if refusal:
                self.refused.append(asked.decode())
                conn.sendall(_answer(400, {"message": refusal}))
                return
            head = head.replace(b"/v" + asked + rest, f"/v{self.engine_version}".encode() + rest, 1)
        else:
            plain = _UNVERSIONED.match(head)
            self.seen.append(("", plain.group(2).decode() if plain else "?"))
            if plain and plain.group(2).split(b"?")[0] == b"/version":
                conn.sendall(
                    _answer(200, {"Version": "gate", "ApiVersion": self.api_max, "MinAPIVersion": self.api_min})
                )
                return
        length = int(
            next(
                (line.split(b":", 1)[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
                b"0",
            )
        )
        body = rfile.read(length) if length else b""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as engine:
            engine.connect(self.engine_socket)
            engine.sendall(_close_after(head) + body)
            for answer in iter(lambda: engine.recv(65536), b""):  # until the engine closes
                conn.sendall(answer)

    def _refusal(self, asked: str) -> str | None:
        if as_tuple(asked) < as_tuple(self.api_min):
            return (
                f"client version {asked} is too old. Minimum supported API version is {self.api_min}, "
                "please upgrade your client to a newer version"
            )
        if as_tuple(asked) > as_tuple(self.api_max):
            return f"client version {asked} is too new. Maximum supported API version is {self.api_max}"
        return None


def _close_after(head: bytes) -> bytes:
    """The request with `Connection: close`: the engine ends the connection after answering."""
    lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:")]
    end = lines.index(b"")
    return b"\r\n".join([*lines[:end], b"Connection: close", *lines[end:]])


def _answer(status: int, body: dict) -> bytes:
    data = json.dumps(body).encode()
    reason = {200: "OK", 400: "Bad Request"}[status]
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    return head.encode() + b"Connection: close\r\n\r\n" + data
