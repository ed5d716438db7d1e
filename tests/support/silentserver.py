"""A server that accepts connections and never answers: what a hung dockerd or a hung
registry looks like to a client. It holds every connection until closed and remembers the
pid of each connecting local process (SO_PEERCRED, Unix sockets only)."""

from __future__ import annotations

import socket
import struct
import threading


class SilentServer:
    def __init__(self, server: socket.socket):
        self.server = server
        self.server.listen(64)
        self.peers: list[int] = []
        self.held: list[socket.socket] = []
        self.path = None  # a Unix socket's path
        self.port = None  # a TCP port on 127.0.0.1
        threading.Thread(target=self._accept, daemon=True).start()

    @classmethod
    def unix(cls, path) -> SilentServer:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
        silent = cls(server)
        silent.path = path
        return silent

    @classmethod
    def tcp(cls) -> SilentServer:
        silent = cls(socket.create_server(("127.0.0.1", 0)))
        silent.port = silent.server.getsockname()[1]
        return silent

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            if conn.family == socket.AF_UNIX:
                creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
                self.peers.append(struct.unpack("3i", creds)[0])
            self.held.append(conn)

    def close(self) -> None:
        self.server.close()
        for conn in self.held:
            conn.close()
