"""A TCP port of the host's loopback, reachable from inside another network namespace.

A private dockerd runs in a network namespace of its own (tests/support/privateengine.py), where
the shared registry at 127.0.0.1:5000 does not exist: this listens on the same address
inside that namespace and copies each connection to the host's one."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from typing import Any


class NetnsForward:
    def __init__(self, pid: int, host: str, port: int):
        self.pid, self.host, self.port = pid, host, port
        self.listener: socket.socket | None = None

    def __enter__(self) -> NetnsForward:
        made: dict[str, Any] = {}
        subprocess.run(["nsenter", f"--net=/proc/{self.pid}/ns/net", "ip", "link", "set", "lo", "up"], check=True)

        def listen_inside() -> None:  # setns changes only this thread's namespace
            with open(f"/proc/{self.pid}/ns/net") as target:
                os.setns(target.fileno(), os.CLONE_NEWNET)
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.host, self.port))
            listener.listen(64)
            made["listener"] = listener

        thread = threading.Thread(target=listen_inside)
        thread.start()
        thread.join()
        self.listener = made["listener"]
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.listener is not None:
            self.listener.close()

    def _accept(self) -> None:
        assert self.listener is not None
        while True:
            try:
                inside, _ = self.listener.accept()
            except OSError:
                return
            outside = socket.create_connection((self.host, self.port))  # in the host's namespace
            for a, b in ((inside, outside), (outside, inside)):
                threading.Thread(target=_copy, args=(a, b), daemon=True).start()


def _copy(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(1 << 16):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
