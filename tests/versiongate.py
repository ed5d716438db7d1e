"""A gate in front of a real Docker engine that speaks another API range than the engine:
it answers /version with its own range, refuses a request outside it with the engine's own
400 text ("client version 1.41 is too old. Minimum supported API version is 1.44, ..."),
and passes the rest to the engine at a version the engine takes. Its range changes while
clients stay connected: an engine upgraded mid-run, or a version no real engine here has."""

from __future__ import annotations

import json
import re
import socket
import threading
from pathlib import Path

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
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def host(self) -> str:
        return f"unix://{self.path}"

    def speak(self, api_min: str, api_max: str) -> None:
        """From now on: this range (connections already open stay open)."""
        self.api_min, self.api_max = api_min, api_max

    def close(self) -> None:
        self.server.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        """One request per connection: the answer ends with the connection."""
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            versioned = _VERSIONED.match(head)
            if versioned:
                method, asked, rest = versioned.groups()
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
                    body = {"Version": "gate", "ApiVersion": self.api_max, "MinAPIVersion": self.api_min}
                    conn.sendall(_answer(200, body))
                    return
            self._forward(conn, _close_after(head))

    def _refusal(self, asked: str) -> str | None:
        if as_tuple(asked) < as_tuple(self.api_min):
            return (
                f"client version {asked} is too old. Minimum supported API version is {self.api_min}, "
                "please upgrade your client to a newer version"
            )
        if as_tuple(asked) > as_tuple(self.api_max):
            return f"client version {asked} is too new. Maximum supported API version is {self.api_max}"
        return None

    def _forward(self, conn: socket.socket, head: bytes) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as engine:
            engine.connect(self.engine_socket)
            engine.sendall(head)
            conn.settimeout(0.05)
            while True:  # the rest of the request's body, then the answer until the engine closes
                try:
                    more = conn.recv(65536)
                    if more:
                        engine.sendall(more)
                except (TimeoutError, BlockingIOError):
                    pass
                engine.settimeout(0.05)
                try:
                    answer = engine.recv(65536)
                except TimeoutError:
                    continue
                if not answer:
                    return
                conn.sendall(answer)


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
