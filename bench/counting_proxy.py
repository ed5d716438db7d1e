"""A TCP proxy in front of the reference backend that counts bytes per HTTP path.

Plain HTTP/1.1 only (the bench's backend has no TLS). Requests on one connection are not
pipelined by the agent (requests/urllib3), so each byte of the answer belongs to the last
request head seen on that connection. The head and body of a request (Content-Length
bodies; the agent sends no chunked ones) count as "up", the answer as "down".
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
from collections import defaultdict
from typing import Any

HEAD_LIMIT = 64 * 1024


class CountingProxy:
    def __init__(self, upstream_host: str, upstream_port: int):
        self.upstream = (upstream_host, upstream_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._up: dict[str, int] = defaultdict(int)
        self._down: dict[str, int] = defaultdict(int)
        self._requests: dict[str, int] = defaultdict(int)
        self._closed = False

    def __enter__(self) -> CountingProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._closed = True
        self.listener.close()

    def snapshot(self) -> dict[str, dict[str, int]]:
        """{path: {"up": bytes, "down": bytes, "requests": n}} so far."""
        with self._lock:
            return {
                p: {"up": self._up[p], "down": self._down[p], "requests": self._requests[p]}
                for p in set(self._up) | set(self._down)
            }

    def _count(self, table: dict[str, int], path: str, n: int) -> None:
        with self._lock:
            table[path] += n

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            path = ["(none)"]  # the current request's path, shared by both directions
            threading.Thread(target=self._upstream, args=(client, server, path), daemon=True).start()
            threading.Thread(target=self._downstream, args=(server, client, path), daemon=True).start()

    def _upstream(self, client: socket.socket, server: socket.socket, path: list[str]) -> None:
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = client.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                    if len(buffer) > HEAD_LIMIT:
                        return
                head, _, rest = buffer.partition(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                parts = lines[0].split(b" ")
                path[0] = parts[1].split(b"?")[0].decode("latin-1") if len(parts) > 1 else "(bad)"
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                with self._lock:
                    self._requests[path[0]] += 1
                while len(rest) < length:
                    chunk = client.recv(65536)
                    if not chunk:
                        return
                    rest += chunk
                message = head + b"\r\n\r\n" + rest[:length]
                buffer = rest[length:]
                self._count(self._up, path[0], len(message))
                if path[0].endswith("/uplink"):
                    self._count_kinds(path[0], rest[:length])
                server.sendall(message)
        except OSError:
            pass
        finally:
            _close(client, server)

    def _count_kinds(self, path: str, body: bytes) -> None:
        """Each record's JSON bytes (of a gzip body too: the path's row has its wire bytes)."""
        try:
            records = json.loads(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)["records"]
        except (ValueError, KeyError, TypeError, OSError, EOFError):
            return
        for record in records:
            key = f"{path} kind={record.get('kind')}"
            self._count(self._up, key, len(json.dumps(record, separators=(",", ":"))))
            self._count(self._requests, key, 1)  # records, for these rows

    def _downstream(self, server: socket.socket, client: socket.socket, path: list[str]) -> None:
        try:
            while True:
                chunk = server.recv(65536)
                if not chunk:
                    return
                self._count(self._down, path[0], len(chunk))
                client.sendall(chunk)
        except OSError:
            pass
        finally:
            _close(client, server)


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()
