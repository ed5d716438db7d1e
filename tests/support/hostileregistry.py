"""A registry stand-in that drips its answer head (one byte at a time, never ending) on
every connection, as a hostile registry does: for tests that need pulls held by one."""

from __future__ import annotations

import socket
import threading

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Drip: " + b"x" * 100_000


class DrippingRegistry:
    def __init__(self, interval_s: float = 0.3) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.interval_s = interval_s
        self.connections = 0
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.listener.getsockname()[1]}"

    def close(self) -> None:
        self.stop.set()
        self.listener.close()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(1.0)
            try:
                conn.recv(65536)
            except OSError:
                pass
            for byte in HEAD:
                if self.stop.wait(self.interval_s):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return
